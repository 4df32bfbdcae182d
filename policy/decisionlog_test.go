package policy

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"testing/fstest"
	"time"
)

// maskRules is the administrator's system.log policy: the principal's
// name is erased from every event, and a CI session's id is replaced.
const maskRules = `package system.log

mask contains "/input/principal/name"

mask contains {"op": "upsert", "path": "/input/request/session_id", "value": "**REDACTED**"} if {
	startswith(input.input.request.session_id, "ci-")
}
`

var maskFile = map[string]string{"system/log/mask.rego": maskRules}

// uploadWindow bounds how long a logged decision may take to reach the
// receiver: reporting every 1 to 2 s, retries no further apart than 2 s.
const uploadWindow = 15 * time.Second

// decideAll makes n decisions of each kind and returns their ids.
func decideAll(t *testing.T, e *Engine, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for range n {
		d := e.Decide(ctx, ciBashInput())
		b := e.DecideBrowser(ctx, browserInput("https://example.com/cb?code=oauth-secret#tok", "https", "example.com", 443, "93.184.216.34"))
		g := e.DecideEgress(ctx, EgressInput{Mode: "PERMISSIVE", Host: "pypi.org", Port: 443, Scheme: "https", SessionID: "ci-1", Resolved: []string{"151.101.0.223"}})
		for _, id := range []string{d.DecisionID, b.DecisionID, g.DecisionID} {
			if id == "" {
				t.Fatal("a decision without a decision_id")
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// waitLogged waits until the receiver holds an event for every id.
func waitLogged(t *testing.T, srv *opaServer, ids []string, within time.Duration) map[string]map[string]any {
	t.Helper()
	var got map[string]map[string]any
	waitUntil(t, within, "every decision in the log", func() bool {
		got = srv.eventsByID()
		for _, id := range ids {
			if got[id] == nil {
				return false
			}
		}
		return true
	})
	return got
}

func lookup(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func TestDecisionLogsFromBundleAreMaskedAndGzipped(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t)
	srv.publish(buildBundle(t, "rev-1", key.private, maskFile))
	e := bundleEngine(t, srv.config(key, true), t.TempDir())
	waitUntil(t, pollWindow, "bundle active", func() bool { return bundleRevision(e) == "rev-1" })

	ids := decideAll(t, e, 3)
	got := waitLogged(t, srv, ids, uploadWindow)
	for i, id := range ids {
		ev := got[id]
		wantPath := []string{execLogPath, browserLogPath, egressLogPath}[i%3]
		if ev["path"] != wantPath {
			t.Errorf("%s: path %v, want %s", id, ev["path"], wantPath)
		}
		if rev := lookup(ev, "bundles", "sandgate", "revision"); rev != "rev-1" {
			t.Errorf("%s: bundles.sandgate.revision %v, want rev-1", id, rev)
		}
		if ev["timestamp"] == nil || lookup(ev, "labels", "id") == nil {
			t.Errorf("%s: no timestamp or labels.id: %v", id, ev)
		}
		if lookup(ev, "result", "action") == nil {
			t.Errorf("%s: no result.action: %v", id, ev["result"])
		}
		if wantPath == browserLogPath {
			if u := lookup(ev, "input", "request", "url"); u != "https://example.com/cb" {
				t.Errorf("%s: the browser decision's logged URL is %v, want it without query and fragment", id, u)
			}
		}
		if wantPath != execLogPath {
			continue
		}
		if lookup(ev, "input", "principal", "name") != nil {
			t.Errorf("%s: input.principal.name was not erased: %v", id, lookup(ev, "input", "principal"))
		}
		if lookup(ev, "input", "request", "session_id") != "**REDACTED**" {
			t.Errorf("%s: session_id %v, want **REDACTED**", id, lookup(ev, "input", "request", "session_id"))
		}
		if !slices.Contains(anyStrings(ev["erased"]), "/input/principal/name") || !slices.Contains(anyStrings(ev["masked"]), "/input/request/session_id") {
			t.Errorf("%s: erased %v masked %v", id, ev["erased"], ev["masked"])
		}
		if lookup(ev, "result", "action") != "allow" || lookup(ev, "input", "request", "code_sha256") == nil {
			t.Errorf("%s: result %v input %v", id, ev["result"], ev["input"])
		}
	}
	srv.mu.Lock()
	batches := srv.batches
	srv.mu.Unlock()
	if batches == 0 {
		t.Fatal("no gzipped batch") // the receiver refuses any other body
	}
	st := e.Status()
	if st.DecisionLogs == nil || st.DecisionLogs.Logged < uint64(len(ids)) || st.Plugins["decision_logs"] != "OK" {
		t.Fatalf("status: decision logs %+v, plugins %v", st.DecisionLogs, st.Plugins)
	}
}

func anyStrings(v any) []string {
	var out []string
	arr, _ := v.([]any)
	for _, x := range arr {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// TestStatusReportsInOPAShape checks the status plugin's reports: the
// active revision on activation, and bundle_error on a refused bundle.
func TestStatusReportsInOPAShape(t *testing.T) {
	key := newSigningKey(t)
	srv := newOPAServer(t)
	srv.publish(buildBundle(t, "rev-1", key.private, nil))
	e := bundleEngine(t, srv.config(key, true), t.TempDir())
	reported := func(rev, code string) func() bool {
		return func() bool {
			srv.mu.Lock()
			defer srv.mu.Unlock()
			for _, st := range srv.statuses {
				b := lookup(st, "bundles", "sandgate")
				if lookup(b, "active_revision") == rev && (code == "" || lookup(b, "code") == code) {
					return lookup(st, "labels", "id") != nil && lookup(st, "plugins", "bundle", "state") != nil
				}
			}
			return false
		}
	}
	waitUntil(t, pollWindow, "a status report with rev-1 active", reported("rev-1", ""))
	srv.publish(buildBundle(t, "rev-bad", newSigningKey(t).private, nil))
	waitUntil(t, pollWindow, "a status report with the refusal", reported("rev-1", "bundle_error"))
	if e.Revision() == "" {
		t.Fatal("no revision in force")
	}
}

// TestDecisionLogsFromFolder: a folder policy with decision_logs in its
// OPA configuration logs every decision, masked by the folder's own
// system.log rules, with the folder's revision.
func TestDecisionLogsFromFolder(t *testing.T) {
	srv := newOPAServer(t)
	cfg, _ := json.Marshal(map[string]any{
		"services":      map[string]any{"ctl": map[string]any{"url": srv.srv.URL}},
		"decision_logs": map[string]any{"service": "ctl", "reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 2}},
	})
	tree := treeWith(t, maskFile)
	e, err := New(context.Background(), Options{FS: tree, OPAConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ids := decideAll(t, e, 2)
	got := waitLogged(t, srv, ids[:1], uploadWindow)
	ev := got[ids[0]]
	if ev["revision"] != e.Revision() {
		t.Errorf("revision %v, want %s", ev["revision"], e.Revision())
	}
	if lookup(ev, "input", "principal", "name") != nil {
		t.Errorf("folder mask not applied: %v", lookup(ev, "input", "principal"))
	}
}

func TestFolderRefusesBundleConfig(t *testing.T) {
	_, err := New(context.Background(), Options{FS: fstest.MapFS{}, OPAConfig: []byte(`bundles: {x: {resource: /b}}`)})
	if err == nil {
		t.Fatal("a folder source accepted a bundles section")
	}
}

// TestDecisionLogsSurviveOutage: the receiver answers 503 for a while;
// decisions made before and during the outage all arrive afterwards.
func TestDecisionLogsSurviveOutage(t *testing.T) {
	testDecisionLogOutage(t, 3*time.Second)
}

// TestDecisionLogsSurviveMinuteOutage is the acceptance's 60 s outage.
func TestDecisionLogsSurviveMinuteOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("60 s receiver outage; skipped with -short")
	}
	testDecisionLogOutage(t, 60*time.Second)
}

func testDecisionLogOutage(t *testing.T, outage time.Duration) {
	key := newSigningKey(t)
	srv := newOPAServer(t)
	srv.publish(buildBundle(t, "rev-1", key.private, maskFile))
	e := bundleEngine(t, srv.config(key, true), t.TempDir())
	waitUntil(t, pollWindow, "bundle active", func() bool { return bundleRevision(e) == "rev-1" })

	ids := decideAll(t, e, 2)
	waitLogged(t, srv, ids, uploadWindow)
	srv.setDown(true)
	end := time.Now().Add(outage)
	var during []string
	var most int64 // OPA's buffer is empty while an upload attempt holds it, so one sample can miss it
	for time.Now().Before(end) {
		during = append(during, decideAll(t, e, 5)...)
		if st := e.Status().DecisionLogs; st != nil {
			most = max(most, st.Buffered)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if most == 0 {
		t.Errorf("nothing buffered during the outage: %+v", e.Status().DecisionLogs)
	}
	srv.setDown(false)
	got := waitLogged(t, srv, during, uploadWindow)
	t.Logf("%d decisions during a %v outage, all received (%d events in all)", len(during), outage, len(got))
}
