package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
)

// Named snapshots end to end (issue 30).

// takeSnapshot takes a snapshot of session as tok and returns its body.
func takeSnapshot(t *testing.T, e *env, tok, session, name string) map[string]any {
	t.Helper()
	r := e.do("POST", "/v1/sessions/"+session+"/snapshots", tok, map[string]any{"name": name})
	if r.status != 201 {
		t.Fatalf("snapshot %s of %s: %d %s", name, session, r.status, r.raw)
	}
	return r.body
}

// TestSnapshotGVisor: a snapshot of a gVisor session holding a DataFrame
// keeps its kernel (uncompressed, restored with lazy page loading, and
// compressed) and its files as they were when it was taken; two sessions started from it read the DataFrame and the files,
// draw different random numbers and are audited as from the snapshot;
// once deleted it can start no session, and nothing restored is left.
func TestSnapshotGVisor(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(map[bool]string{false: "uncompressed", true: "compressed"}[compress], func(t *testing.T) {
			snapshotGVisor(t, compress)
		})
	}
}

func snapshotGVisor(t *testing.T, compress bool) {
	g, _ := newPauseGVisor(t)
	if got := g.Capabilities().Snapshot; got != executors.SnapshotMemory {
		t.Fatalf("gvisor reports snapshot %q, want memory", got)
	}
	e := newEnv(t, envOpts{mode: "STRICT", executors: []executors.Executor{g}, policyFS: routeAllTo(t, "gvisor"),
		snapshots: manager.SnapshotConfig{Compress: compress}})
	// snapshot: memory is accepted where stateful cells go to gVisor.
	if r := e.do("POST", "/v1/sessions", agentTok, map[string]any{"id": "sp", "snapshot": "memory"}); r.status != 201 {
		t.Fatalf("snapshot: memory on gVisor: %d %s", r.status, r.raw)
	}
	const src = "sp"
	if r := e.do("PUT", "/v1/sessions/"+src+"/files/content?path=notes.txt", agentTok, "at the snapshot"); r.status/100 != 2 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	if r := pauseCell(t, e, src, pandasState, 120); r.body["success"] != true {
		t.Fatalf("state: %s", r.raw)
	}
	snap := takeSnapshot(t, e, agentTok, src, "with-df")
	id, _ := snap["id"].(string)
	if snap["memory"] != true || snap["compressed"] != compress || snap["bytes"].(float64) < 1<<20 || id == "" {
		t.Fatalf("snapshot: %v", snap)
	}
	// The source goes on, and what it does afterwards is not in the
	// snapshot.
	pauseCell(t, e, src, "secret = 'changed'", 60)
	e.do("PUT", "/v1/sessions/"+src+"/files/content?path=notes.txt", agentTok, "after")

	l := e.do("GET", "/v1/snapshots", agentTok, nil)
	if l.status != 200 || !strings.Contains(string(l.raw), `"name":"with-df"`) {
		t.Fatalf("list: %d %s", l.status, l.raw)
	}
	draws := map[string]bool{}
	for _, s := range []string{"from-a", "from-b"} {
		c := e.do("POST", "/v1/sessions", agentTok, map[string]any{"id": s, "from_snapshot": id})
		if c.status != 201 {
			t.Fatalf("create %s from the snapshot: %d %s", s, c.status, c.raw)
		}
		r := pauseCell(t, e, s, pandasRead, 60)
		if r.body["stdout"] != pandasWant || r.body["kernel_restarted"] != false {
			t.Fatalf("%s reads: %s", s, r.raw)
		}
		if f := e.do("GET", "/v1/sessions/"+s+"/files/content?path=notes.txt", agentTok, nil); string(f.raw) != "at the snapshot" {
			t.Fatalf("%s file: %d %q", s, f.status, f.raw)
		}
		r = pauseCell(t, e, s, "import random\nprint(random.random(), np.random.random())", 60)
		draws[r.body["stdout"].(string)] = true
	}
	if len(draws) != 2 {
		t.Fatalf("sessions from one snapshot draw the same numbers: %v", draws)
	}
	requireAuditKinds(t, e, src, "snapshot.create", "session.from_snapshot")

	if d := e.do("DELETE", "/v1/snapshots/"+id, agentTok, nil); d.status != 204 {
		t.Fatalf("delete: %d %s", d.status, d.raw)
	}
	if c := e.do("POST", "/v1/sessions", agentTok, map[string]any{"id": "from-c", "from_snapshot": id}); c.status != 404 || c.errCode() != "not_found" {
		t.Fatalf("from a deleted snapshot: %d %s", c.status, c.raw)
	}
	// The tenant's quota lock file (manager/snapshot_quota.go) stays; no
	// snapshot directory may.
	if stay, _ := filepath.Glob(filepath.Join(e.dataDir, "snapshots", "named", "a", "snap-*")); len(stay) != 0 {
		t.Fatalf("the deleted snapshot's files stay: %v", stay)
	}
	for _, s := range []string{src, "from-a", "from-b"} {
		if d := e.do("DELETE", "/v1/sessions/"+s, agentTok, nil); d.status != 204 {
			t.Fatalf("delete %s: %d", s, d.status)
		}
	}
	if n := g.RestoredSandboxes(); n != 0 {
		t.Fatalf("%d restored sandboxes after deleting every session", n)
	}
}

// TestSnapshotFilesQuotaAndTenants: on a tier without memory a snapshot
// keeps the workspace; bad names, a name taken, the tenant's count and
// byte quotas, an unknown snapshot and another tenant's each get a
// clear error with a stable code, and no tenant sees or reaches
// another's snapshots.
func TestSnapshotFilesQuotaAndTenants(t *testing.T) {
	e := newEnv(t, envOpts{tokens: tenantTokens(), quotas: manager.QuotaConfig{
		Default: manager.Quota{MaxSnapshots: 2},
		Tenants: map[string]manager.Quota{"team-b": {MaxSnapshotBytes: 1000}},
	}})
	if r := e.do("PUT", "/v1/sessions/fs/files/content?path=k.txt", teamATok, "kept"); r.status/100 != 2 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	snap := takeSnapshot(t, e, teamATok, "fs", "one")
	if snap["memory"] != false || snap["tenant"] != "team-a" || snap["session"] != "fs" {
		t.Fatalf("snapshot: %v", snap)
	}
	id := snap["id"].(string)
	c := e.do("POST", "/v1/sessions", teamATok, map[string]any{"id": "fs2", "from_snapshot": id})
	if c.status != 201 {
		t.Fatalf("from the snapshot: %d %s", c.status, c.raw)
	}
	if f := e.do("GET", "/v1/sessions/fs2/files/content?path=k.txt", teamATok, nil); string(f.raw) != "kept" {
		t.Fatalf("file: %d %q", f.status, f.raw)
	}
	takeSnapshot(t, e, teamATok, "fs", "two")
	if r := e.do("PUT", "/v1/sessions/big/files/content?path=big.bin", teamBTok, strings.Repeat("x", 4000)); r.status/100 != 2 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	for _, c := range []struct {
		what, method, path, tok string
		body                    any
		status                  int
		code                    string
	}{
		{"bad name", "POST", "/v1/sessions/fs/snapshots", teamATok, map[string]any{"name": "../x"}, 400, "invalid_request"},
		{"no name", "POST", "/v1/sessions/fs/snapshots", teamATok, map[string]any{}, 400, "invalid_request"},
		{"name taken", "POST", "/v1/sessions/fs/snapshots", teamATok, map[string]any{"name": "one"}, 409, "conflict"},
		{"count quota", "POST", "/v1/sessions/fs2/snapshots", teamATok, map[string]any{"name": "three"}, 429, "quota_exceeded"},
		{"byte quota", "POST", "/v1/sessions/big/snapshots", teamBTok, map[string]any{"name": "big"}, 429, "quota_exceeded"},
		{"unknown snapshot", "POST", "/v1/sessions", teamATok, map[string]any{"id": "x1", "from_snapshot": "snap-0123456789abcdef"}, 404, "not_found"},
		{"malformed snapshot", "POST", "/v1/sessions", teamATok, map[string]any{"id": "x2", "from_snapshot": "../../a"}, 404, "not_found"},
		{"another tenant's, from", "POST", "/v1/sessions", teamBTok, map[string]any{"id": "x3", "from_snapshot": id}, 404, "not_found"},
		{"another tenant's, delete", "DELETE", "/v1/snapshots/" + id, teamBTok, nil, 404, "not_found"},
		{"another tenant's session", "POST", "/v1/sessions/team-a~fs/snapshots", teamBTok, map[string]any{"name": "x"}, 404, "not_found"},
	} {
		r := e.do(c.method, c.path, c.tok, c.body)
		if r.status != c.status || r.errCode() != c.code {
			t.Errorf("%s: %d %q, want %d %q (%s)", c.what, r.status, r.errCode(), c.status, c.code, r.raw)
		}
	}
	for _, s := range []string{"x1", "x2", "x3"} {
		if r := e.do("GET", "/v1/sessions/"+s, teamBTok, nil); r.status != 404 {
			t.Errorf("a refused from_snapshot left session %s: %d", s, r.status)
		}
	}
	if l := e.do("GET", "/v1/snapshots", teamBTok, nil); l.status != 200 || strings.Contains(string(l.raw), id) {
		t.Errorf("team-b lists team-a's snapshot: %d %s", l.status, l.raw)
	}
	// Deleting one frees a place in the count quota.
	if d := e.do("DELETE", "/v1/snapshots/"+id, teamATok, nil); d.status != 204 {
		t.Fatalf("delete: %d %s", d.status, d.raw)
	}
	takeSnapshot(t, e, teamATok, "fs2", "three")

	// snapshot: memory where the session's stateful cells do not go to
	// an executor that keeps memory: refused, naming what is missing.
	r := e.do("POST", "/v1/sessions", teamATok, map[string]any{"id": "mem", "snapshot": "memory"})
	if r.status != 403 || r.errCode() != "policy_denied" || !strings.Contains(string(r.raw), "executor.capability_missing") ||
		!strings.Contains(string(r.raw), "snapshot: memory") {
		t.Errorf("snapshot: memory without a memory tier: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/sessions/mem", teamATok, nil); r.status != 404 {
		t.Errorf("the refused session exists: %d", r.status)
	}
	if r := e.do("POST", "/v1/sessions", teamATok, map[string]any{"id": "mem", "snapshot": "disk"}); r.status != 400 || r.errCode() != "invalid_request" {
		t.Errorf("snapshot: disk: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/sessions", teamATok, map[string]any{"id": "fsmode", "snapshot": "filesystem"}); r.status != 201 {
		t.Errorf("snapshot: filesystem: %d %s", r.status, r.raw)
	}
}

// TestSnapshotRetention: a snapshot past its retention is neither listed
// nor usable, and its files are collected.
func TestSnapshotRetention(t *testing.T) {
	e := newEnv(t, envOpts{snapshots: manager.SnapshotConfig{Retention: 2 * time.Second}})
	if r := e.do("PUT", "/v1/sessions/rs/files/content?path=k.txt", agentTok, "kept"); r.status/100 != 2 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	snap := takeSnapshot(t, e, agentTok, "rs", "short")
	dir := filepath.Join(e.dataDir, "snapshots", "named", "a", snap["id"].(string))
	if _, err := os.Stat(filepath.Join(dir, "meta.json")); err != nil {
		t.Fatalf("snapshot files: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.do("GET", "/v1/snapshots", agentTok, nil) // collects, as the reaper does
		_, err := os.Stat(dir)
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired snapshot's files stay: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if l := e.do("GET", "/v1/snapshots", agentTok, nil); strings.Contains(string(l.raw), "short") {
		t.Fatalf("expired snapshot listed: %s", l.raw)
	}
	if c := e.do("POST", "/v1/sessions", agentTok, map[string]any{"id": "r2", "from_snapshot": snap["id"]}); c.status != 404 {
		t.Fatalf("from an expired snapshot: %d %s", c.status, c.raw)
	}
}
