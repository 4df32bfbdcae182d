package policy

import (
	"context"
	"strings"
	"testing"
	"time"
)

// pollWindow bounds how long a new revision may take to reach an engine:
// the long poll answers as soon as the server has it, and the slowest path
// (a plain poll) waits max_delay_seconds (2 s) between requests.
const pollWindow = 10 * time.Second

// rolloutWindow bounds a new revision's arrival on three replicas at once
// (TestBundleRolloutReachesThreeReplicas).
const rolloutWindow = 30 * time.Second

// ciRule denies bash in sessions starting with "ci-": revision 2 of the
// administrator's bundle.
var ciRule = map[string]string{"sandgate/exec/ci.rego": ciBashRule}

func TestBundleActivatesAndFollowsNewRevisions(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t)
	srv.publish(buildBundle(t, "rev-1", key.private, nil))
	e := bundleEngine(t, srv.config(key, false), t.TempDir())
	ctx := context.Background()

	waitUntil(t, pollWindow, "bundle rev-1 active", func() bool { return bundleRevision(e) == "rev-1" })
	st := e.Status()
	if st.Revision == "" || st.Source != "bundle" || st.LastError != "" {
		t.Fatalf("status after activation: %+v", st)
	}
	if d := e.Decide(ctx, ciBashInput()); d.Action != ActionAllow || d.PolicyRevision != st.Revision {
		t.Fatalf("rev-1: %s %v (revision %s), want allow on %s", d.Action, d.Reasons, d.PolicyRevision, st.Revision)
	}

	reloaded := make(chan string, 4)
	e.OnReload(func(rev string) { reloaded <- rev })
	start := time.Now()
	srv.publish(buildBundle(t, "rev-2", key.private, ciRule))
	waitUntil(t, pollWindow, "bundle rev-2 active", func() bool { return bundleRevision(e) == "rev-2" })
	t.Logf("rev-2 active after %v", time.Since(start))
	if d := e.Decide(ctx, ciBashInput()); d.Action != ActionDeny || !d.OnlyReason("admin.ci_bash") {
		t.Fatalf("rev-2: %s %v, want deny admin.ci_bash", d.Action, d.Reasons)
	}
	select {
	case rev := <-reloaded:
		if rev != e.Revision() || rev == st.Revision {
			t.Fatalf("OnReload got %s; in force %s, before %s", rev, e.Revision(), st.Revision)
		}
	default:
		t.Fatal("OnReload was not called for the new bundle")
	}
	srv.mu.Lock()
	longPolls, notModified := srv.longPolls, srv.notModified
	srv.mu.Unlock()
	if longPolls == 0 {
		t.Error("the bundle plugin never long-polled")
	}
	_ = notModified // a long poll that a publish answers ends in 200, not 304
}

func TestBundleETagAnswersNotModified(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t)
	srv.publish(buildBundle(t, "rev-1", key.private, nil))
	// Short polls, no long polling: every request after the first carries
	// the ETag and is answered 304.
	cfg := strings.Replace(string(srv.config(key, false)), `,"long_polling_timeout_seconds":5`, ``, 1)
	e := bundleEngine(t, []byte(cfg), t.TempDir())
	waitUntil(t, pollWindow, "bundle active", func() bool { return bundleRevision(e) == "rev-1" })
	waitUntil(t, pollWindow, "a 304", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.notModified > 0
	})
	if st := e.Status(); st.LastError != "" || st.Bundles["sandgate"].Code != "" {
		t.Fatalf("a 304 is not an error: %+v", st)
	}
}

// TestBundleRefusals publishes bundles that must be refused while rev-1
// stays in force: one signed with another key, one with a Rego error, one
// OPA compiles but the engine refuses (a built-in it forbids), and one
// without the decision rule. Each refusal shows in Status and clears when
// a good bundle activates.
func TestBundleRefusals(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t)
	srv.publish(buildBundle(t, "rev-1", key.private, nil))
	e := bundleEngine(t, srv.config(key, false), t.TempDir())
	waitUntil(t, pollWindow, "bundle rev-1 active", func() bool { return bundleRevision(e) == "rev-1" })
	good := e.Revision()

	cases := []struct {
		name  string
		build func() []byte
		want  string
	}{
		{"bad signature", func() []byte { return buildBundle(t, "rev-bad-sig", newSigningKey(t).private, ciRule) }, "verify JWT signature"},
		{"unsigned", func() []byte { return buildBundle(t, "rev-unsigned", "", ciRule) }, "signature"},
		{"compile error", func() []byte {
			return buildBundle(t, "rev-type-error", key.private, map[string]string{
				"sandgate/exec/broken.rego": "package sandgate.exec\n\ndeny_reasons contains 1 if input.request.language == 7\n",
			})
		}, "rego_type_error"},
		{"refused built-in", func() []byte {
			return buildBundle(t, "rev-http-send", key.private, map[string]string{
				"sandgate/exec/phone.rego": "package sandgate.exec\n\nphone := http.send({\"method\": \"GET\", \"url\": \"http://example.com\"})\n",
			})
		}, "http.send"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv.publish(tc.build())
			waitUntil(t, pollWindow, "refusal visible", func() bool { return strings.Contains(e.Status().LastError, tc.want) })
			st := e.Status()
			if st.Revision != good || bundleRevision(e) != "rev-1" {
				t.Fatalf("after a refused bundle the revision is %s (bundle %s), want %s (rev-1)", st.Revision, bundleRevision(e), good)
			}
			if b := st.Bundles["sandgate"]; b.Code != "bundle_error" {
				t.Fatalf("bundle status %+v, want code bundle_error", b)
			}
			if d := e.Decide(context.Background(), ciBashInput()); d.Action != ActionAllow {
				t.Fatalf("decision under the kept revision: %s %v", d.Action, d.Reasons)
			}
		})
	}

	srv.publish(buildBundle(t, "rev-3", key.private, ciRule))
	waitUntil(t, pollWindow, "rev-3 active", func() bool { return bundleRevision(e) == "rev-3" })
	if st := e.Status(); st.LastError != "" || st.Bundles["sandgate"].Code != "" {
		t.Fatalf("the refusal outlived a good bundle: %+v", st)
	}
}

func TestBundlePersistedRestartWithServerDown(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t)
	srv.publish(buildBundle(t, "rev-2", key.private, ciRule))
	persist := t.TempDir()
	cfg := srv.config(key, false)
	first := bundleEngine(t, cfg, persist)
	waitUntil(t, pollWindow, "bundle active", func() bool { return bundleRevision(first) == "rev-2" })
	want := first.Revision()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = first.Close(ctx)
	srv.close()

	second := bundleEngine(t, cfg, persist)
	// The persisted bundle activates inside New: no waiting.
	if got := second.Revision(); got != want {
		t.Fatalf("restarted on %q, want the persisted %q", got, want)
	}
	if d := second.Decide(context.Background(), ciBashInput()); d.Action != ActionDeny || !d.OnlyReason("admin.ci_bash") {
		t.Fatalf("restarted decision: %s %v, want the persisted bundle's deny", d.Action, d.Reasons)
	}
}

func TestBundleNotYetActiveDenies(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t) // serves no bundle: 404
	e := bundleEngine(t, srv.config(key, false), t.TempDir())
	if st := e.Status(); st.Revision != "" {
		t.Fatalf("revision %q with no bundle", st.Revision)
	}
	d := e.Decide(context.Background(), ciBashInput())
	if d.Action != ActionDeny || !d.OnlyReason(ReasonNotLoaded) || d.DecisionID == "" {
		t.Fatalf("no bundle yet: %+v, want a deny policy.not_loaded with a decision_id", d)
	}
	if _, err := e.Reload(context.Background()); err == nil {
		t.Fatal("Reload of a bundle source succeeded")
	}
}

// TestBundleRolloutReachesThreeReplicas: three engines on one bundle
// server all activate it, and a new revision reaches all three within the
// polling window.
func TestBundleRolloutReachesThreeReplicas(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t)
	srv.publish(buildBundle(t, "rev-1", key.private, nil))
	cfg := srv.config(key, false)
	replicas := []*Engine{bundleEngine(t, cfg, t.TempDir()), bundleEngine(t, cfg, t.TempDir()), bundleEngine(t, cfg, t.TempDir())}
	all := func(rev string) func() bool {
		return func() bool {
			for _, e := range replicas {
				if bundleRevision(e) != rev {
					return false
				}
			}
			return true
		}
	}
	// The first activation is no rollout: a loaded CI machine once took
	// over 10 s (a download retried after its backoff). rev-2 is held to
	// rolloutWindow: the long poll brings it at once (pollWindow), but
	// three activations compiled under -race
	// while `make test` runs other packages on 2 cores once took longer
	// than 10 s (a .ci/run of 3386891); a replica that never takes rev-2 still fails.
	waitUntil(t, time.Minute, "rev-1 on every replica", all("rev-1"))
	start := time.Now()
	srv.publish(buildBundle(t, "rev-2", key.private, ciRule))
	waitUntil(t, rolloutWindow, "rev-2 on every replica", all("rev-2"))
	t.Logf("rev-2 on all three after %v", time.Since(start))
	want := replicas[0].Revision()
	for i, e := range replicas {
		if e.Revision() != want {
			t.Fatalf("replica %d serves %s, replica 0 %s", i, e.Revision(), want)
		}
	}
}
