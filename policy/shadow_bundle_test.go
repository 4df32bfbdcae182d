package policy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shadowEngine is the default folder policy with a candidate from opts'
// shadow fields, logging to the test.
func shadowEngine(t *testing.T, opts Options) *Engine {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := newEngine(t, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e
}

func shadowRevision(e *Engine, bundle string) string {
	st, _ := e.ShadowStatus()
	return st.Bundles[bundle].ActiveRevision
}

// checkShadowDisagrees decides a CI bash run (the candidate's ciRule
// denies it, the active policy allows it) and a python run (both allow):
// the outcome is the active policy's, and exactly the bash decision is
// counted and listed as a disagreement.
func checkShadowDisagrees(t *testing.T, e *Engine) {
	t.Helper()
	ctx := context.Background()
	before, _ := e.ShadowStatus()
	bash := e.Decide(ctx, ciBashInput())
	python := baseInput("PERMISSIVE", "LOW", false)
	py := e.Decide(ctx, python)
	if bash.Action != ActionAllow || py.Action != ActionAllow {
		t.Fatalf("the shadow changed an outcome: bash %s %v, python %s", bash.Action, bash.Reasons, py.Action)
	}
	st, _ := e.ShadowStatus()
	if st.Evaluated[execLogPath]-before.Evaluated[execLogPath] != 2 || st.Disagreements[execLogPath]-before.Disagreements[execLogPath] != 1 {
		t.Fatalf("counts: evaluated %v disagreements %v (before %v %v)", st.Evaluated, st.Disagreements, before.Evaluated, before.Disagreements)
	}
	last := st.Recent[len(st.Recent)-1]
	if last.DecisionID != bash.DecisionID || last.Candidate.Action != ActionDeny || last.Candidate.Reasons[0] != "admin.ci_bash" || len(last.InputSHA256) != 64 {
		t.Fatalf("disagreement %+v", last)
	}
}

// TestShadowFromBundleService: a candidate served by an OPA bundle
// service, signed, is activated by OPA's bundle plugin beside the active
// folder, counts its disagreements on live decisions and changes none;
// a candidate signed with another key and one that does not compile are
// refused with the last good candidate kept and the refusal shown; a
// good one is followed.
func TestShadowFromBundleService(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t)
	srv.publish(buildBundle(t, "cand-1", key.private, ciRule))
	e := shadowEngine(t, Options{ShadowOPAConfig: srv.config(key, false), PersistDir: t.TempDir()})
	waitUntil(t, pollWindow, "candidate cand-1 active", func() bool { return shadowRevision(e, "sandgate") == "cand-1" })
	st, _ := e.ShadowStatus()
	if st.Source != "bundle" || st.Revision == "" || st.Revision == e.Revision() || st.LastError != "" {
		t.Fatalf("shadow status %+v (active %s)", st, e.Revision())
	}
	good := st.Revision
	checkShadowDisagrees(t, e)

	for _, tc := range []struct {
		name, rev, want string
		build           func(rev string) []byte
	}{
		{"bad signature", "cand-bad-sig", "verify JWT signature", func(rev string) []byte {
			return buildBundle(t, rev, newSigningKey(t).private, ciRule)
		}},
		{"unsigned", "cand-unsigned", "signature", func(rev string) []byte { return buildBundle(t, rev, "", ciRule) }},
		{"compile error", "cand-type-error", "rego_type_error", func(rev string) []byte {
			return buildBundle(t, rev, key.private, map[string]string{
				"sandgate/exec/ci.rego":     ciBashRule,
				"sandgate/exec/broken.rego": "package sandgate.exec\n\ndeny_reasons contains 1 if input.request.language == 7\n",
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.publish(tc.build(tc.rev))
			waitUntil(t, pollWindow, "refusal visible", func() bool {
				st, _ := e.ShadowStatus()
				return strings.Contains(st.LastError, tc.want)
			})
			st, _ := e.ShadowStatus()
			if st.Revision != good || st.Bundles["sandgate"].ActiveRevision != "cand-1" || st.Bundles["sandgate"].Code != "bundle_error" {
				t.Fatalf("after a refused candidate: %+v", st)
			}
			if e.Status().LastError != "" {
				t.Fatalf("a refused candidate shows as the active policy's error: %s", e.Status().LastError)
			}
			checkShadowDisagrees(t, e) // the last good candidate still runs
		})
	}

	srv.publish(buildBundle(t, "cand-2", key.private, nil)) // agrees with the active policy
	waitUntil(t, pollWindow, "candidate cand-2 active", func() bool { return shadowRevision(e, "sandgate") == "cand-2" })
	st, _ = e.ShadowStatus()
	if st.LastError != "" || st.Revision == good {
		t.Fatalf("after cand-2: %+v", st)
	}
	before := st.Disagreements[execLogPath]
	e.Decide(context.Background(), ciBashInput())
	if st, _ := e.ShadowStatus(); st.Disagreements[execLogPath] != before {
		t.Fatalf("cand-2 agrees, yet a disagreement was counted: %v", st.Disagreements)
	}
}

// TestShadowNotYetActiveEvaluatesNothing: until a candidate bundle
// activates, decisions are the active policy's and nothing is counted.
func TestShadowNotYetActiveEvaluatesNothing(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t) // serves nothing yet
	e := shadowEngine(t, Options{ShadowOPAConfig: srv.config(key, false)})
	if d := e.Decide(context.Background(), ciBashInput()); d.Action != ActionAllow {
		t.Fatalf("decision %s %v", d.Action, d.Reasons)
	}
	st, ok := e.ShadowStatus()
	if !ok || st.Revision != "" || st.Evaluated[execLogPath] != 0 {
		t.Fatalf("shadow status %+v", st)
	}
}

// TestShadowFromBundleFile: a candidate bundle file on disk, named by
// ShadowDir, or configured as a file:// bundle with a signing section, in
// which case a file signed with another key is refused and says so.
func TestShadowFromBundleFile(t *testing.T) {
	key := newSigningKey(t)
	dir := t.TempDir()
	signed := filepath.Join(dir, "candidate.tar.gz")
	writeBundleFile(t, signed, buildBundle(t, "file-1", key.private, ciRule))

	t.Run("shadow_dir", func(t *testing.T) {
		e := shadowEngine(t, Options{ShadowDir: signed})
		if st, _ := e.ShadowStatus(); st.Source != signed || st.BundleRevisions[shadowBundleName] != "file-1" || st.Revision == "" {
			t.Fatalf("shadow status %+v", st)
		}
		checkShadowDisagrees(t, e)
	})

	fileConfig := func(p string) []byte {
		b, _ := json.Marshal(map[string]any{
			"keys": map[string]any{testKeyID: map[string]any{"key": key.public, "algorithm": "ES256"}},
			"bundles": map[string]any{"candidate": map[string]any{
				"resource": "file://" + p, "signing": map[string]any{"keyid": testKeyID},
			}},
		})
		return b
	}
	t.Run("verified", func(t *testing.T) {
		e := shadowEngine(t, Options{ShadowOPAConfig: fileConfig(signed)})
		waitUntil(t, pollWindow, "verified candidate file active", func() bool { return shadowRevision(e, "candidate") == "file-1" })
		if st, _ := e.ShadowStatus(); st.BundleRevisions["candidate"] != "file-1" {
			t.Fatalf("bundle revisions %v", st.BundleRevisions)
		}
		checkShadowDisagrees(t, e)
	})
	t.Run("bad signature", func(t *testing.T) {
		forged := filepath.Join(dir, "forged.tar.gz")
		writeBundleFile(t, forged, buildBundle(t, "file-forged", newSigningKey(t).private, ciRule))
		e := shadowEngine(t, Options{ShadowOPAConfig: fileConfig(forged)})
		waitUntil(t, pollWindow, "refusal visible", func() bool {
			st, _ := e.ShadowStatus()
			return strings.Contains(st.LastError, "verify JWT signature")
		})
		if st, _ := e.ShadowStatus(); st.Revision != "" || st.Bundles["candidate"].Code != "bundle_error" {
			t.Fatalf("a forged candidate: %+v", st)
		}
		e.Decide(context.Background(), ciBashInput())
		if st, _ := e.ShadowStatus(); st.Evaluated[execLogPath] != 0 {
			t.Fatalf("a refused candidate was evaluated: %v", st.Evaluated)
		}
	})
}

func TestShadowConfigRefusals(t *testing.T) {
	bundles := `"bundles": {"c": {"resource": "file:///nonexistent.tar.gz"}}`
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"decision logs", Options{ShadowOPAConfig: []byte(`{` + bundles + `, "decision_logs": {"console": true}}`)}},
		{"status", Options{ShadowOPAConfig: []byte(`{` + bundles + `, "status": {"console": true}}`)}},
		{"no bundles", Options{ShadowOPAConfig: []byte(`{"services": {"s": {"url": "http://127.0.0.1:1"}}}`)}},
		{"folder and bundles", Options{ShadowDir: t.TempDir(), ShadowOPAConfig: []byte(`{` + bundles + `}`)}},
		{"neither folder nor bundle", Options{ShadowDir: filepath.Join(writeTemp(t, "x.txt"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(context.Background(), tc.opts); !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
		})
	}
}

func writeTemp(t *testing.T, name string) string {
	p := filepath.Join(t.TempDir(), name)
	writeBundleFile(t, p, []byte("x"))
	return p
}
