package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/executors/gvisor"
	"github.com/sandgate/sandgate/policy"
)

// Pause and resume end to end (issue 30), on the real executors.

// newPauseGVisor is the gvisor executor; without runsc or the engine the
// test skips, unless SANDGATE_REQUIRE_GVISOR=1 makes that a failure.
func newPauseGVisor(t *testing.T) (*gvisor.Executor, string) {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	instance := "api-pause-" + hex.EncodeToString(b[:])
	g, err := gvisor.New(t.Context(), docker.Config{Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = g.Close(ctx)
	})
	if err := g.Available(t.Context()); err != nil {
		if os.Getenv("SANDGATE_REQUIRE_GVISOR") == "1" {
			t.Fatalf("gVisor required (SANDGATE_REQUIRE_GVISOR=1): %v", err)
		}
		t.Skipf("gVisor not usable: %v", err)
	}
	return g, instance
}

func newPauseDocker(t *testing.T, instance string) *docker.Executor {
	t.Helper()
	d, err := docker.New(t.Context(), docker.Config{Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.Close(ctx)
	})
	if err := d.Available(t.Context()); err != nil {
		if os.Getenv("SANDGATE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("docker engine required (SANDGATE_REQUIRE_DOCKER=1): %v", err)
		}
		t.Skipf("docker engine not usable: %v", err)
	}
	return d
}

// pauseCell runs code as a stateful cell of session.
func pauseCell(t *testing.T, e *env, session, code string, timeoutS int) resp {
	t.Helper()
	r := e.do("POST", "/v1/sessions/"+session+"/run_code", agentTok,
		map[string]any{"code": code, "language": "python", "stateful": true, "timeout_s": timeoutS})
	if r.status != 200 {
		t.Fatalf("cell %q: %d %s", code, r.status, r.raw)
	}
	return r
}

// routeAllTo is the shipped policy with every STRICT level allowed on
// kind.
func routeAllTo(t *testing.T, kind string) fs.FS {
	t.Helper()
	out, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	const p = "sandgate/config/data.json"
	var doc map[string]any
	if err := json.Unmarshal(out[p].Data, &doc); err != nil {
		t.Fatal(err)
	}
	row := map[string]any{"action": "allow", "executor": kind}
	doc["modes"].(map[string]any)["STRICT"] = map[string]any{"SAFE": row, "LOW": row, "MEDIUM": row, "HIGH": row, "CRITICAL": row}
	doc["isolation_upgrade"].(map[string]any)["modes"] = []string{}
	doc["stateful"].(map[string]any)["executor"] = kind
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	out[p] = &fstest.MapFile{Data: b}
	return out
}

// instanceContainers counts the engine's containers (running or not) of
// one executor instance and session.
func instanceContainers(t *testing.T, instance, session string) int {
	t.Helper()
	cli, err := client.New(client.WithHostFromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	f := make(client.Filters).Add("label", "sandgate.instance="+instance).Add("label", "sandgate.session="+session)
	list, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// waitContainers waits (removal is in the background) until the session
// has want containers, failing after 30 s.
func waitContainers(t *testing.T, instance, session string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := instanceContainers(t, instance, session)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s has %d containers, want %d", session, n, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const pandasState = "import pandas as pd, numpy as np\n" +
	"df = pd.DataFrame({'a': np.arange(100000), 'b': np.arange(100000) * 2})\n" +
	"secret = 'v-%d' % df.b.sum()"

const pandasRead = "print(secret, df.shape, int(df.a.sum()))"

const pandasWant = "v-9999900000 (100000, 2) 4999950000\n"

// TestPauseResumeGVisorKeepsMemory: a gVisor session's kernel holds a
// pandas DataFrame; after pause its containers are gone; after resume
// (explicit, then automatic on the next cell, from a kernel that was
// itself restored) the next cell reads the DataFrame.
func TestPauseResumeGVisorKeepsMemory(t *testing.T) {
	g, instance := newPauseGVisor(t)
	if got := g.Capabilities().Snapshot; got != executors.SnapshotMemory {
		t.Fatalf("gvisor reports snapshot %q, want memory (engine runsc state or exported runtime root missing)", got)
	}
	e := newEnv(t, envOpts{mode: "STRICT", executors: []executors.Executor{g}, policyFS: routeAllTo(t, "gvisor")})
	const id = "gp"
	key := agentKey(id)
	r := pauseCell(t, e, id, pandasState, 120)
	if r.body["success"] != true || r.body["sandbox_type"] != "gvisor" {
		t.Fatalf("first cell: %s", r.raw)
	}
	if n := instanceContainers(t, instance, key); n == 0 {
		t.Fatal("no container holds the session's kernel before pause")
	}

	p := e.do("POST", "/v1/sessions/"+id+"/pause", agentTok, nil)
	if p.status != 200 || p.body["state"] != "paused" {
		t.Fatalf("pause: %d %s", p.status, p.raw)
	}
	waitContainers(t, instance, key, 0)
	if n := g.RestoredSandboxes(); n != 0 {
		t.Fatalf("%d restored sandboxes while paused", n)
	}

	rs := e.do("POST", "/v1/sessions/"+id+"/resume", agentTok, nil)
	if rs.status != 200 || rs.body["state"] != "active" {
		t.Fatalf("resume: %d %s", rs.status, rs.raw)
	}
	r = pauseCell(t, e, id, pandasRead, 60)
	if r.body["stdout"] != pandasWant || r.body["kernel_restarted"] != false {
		t.Fatalf("after resume: %s", r.raw)
	}

	// Paused again (now the restored sandbox is checkpointed), then a
	// cell with no resume first: auto-resume.
	if p := e.do("POST", "/v1/sessions/"+id+"/pause", agentTok, nil); p.status != 200 || p.body["state"] != "paused" {
		t.Fatalf("second pause: %d %s", p.status, p.raw)
	}
	if n := g.RestoredSandboxes(); n != 0 {
		t.Fatalf("%d restored sandboxes after the second pause", n)
	}
	r = pauseCell(t, e, id, pandasRead+"\ndf['c'] = df.a + 1", 60)
	if r.body["stdout"] != pandasWant || r.body["kernel_restarted"] != false {
		t.Fatalf("after auto-resume: %s", r.raw)
	}
	if g.RestoredSandboxes() != 1 {
		t.Fatalf("restored sandboxes %d, want 1", g.RestoredSandboxes())
	}
	requireAuditKinds(t, e, id, "session.pause", "session.resume")

	if d := e.do("DELETE", "/v1/sessions/"+id, agentTok, nil); d.status != 204 {
		t.Fatalf("delete: %d %s", d.status, d.raw)
	}
	if n := g.RestoredSandboxes(); n != 0 {
		t.Fatalf("%d restored sandboxes after delete", n)
	}
}

// requireAuditKinds fails unless the audit log holds a record of each
// kind for session (tenant a).
func requireAuditKinds(t *testing.T, e *env, session string, kinds ...string) {
	t.Helper()
	a := e.do("GET", "/v1/audit?limit=200", adminTok, nil)
	for _, k := range kinds {
		if !strings.Contains(string(a.raw), `"kind":"`+k+`"`) {
			t.Fatalf("no %s audit record for %s: %s", k, session, a.raw)
		}
	}
}

// TestPauseResumeKeepsWorkspace: on docker and subprocess a pause frees
// the session's containers and processes, the workspace stays, and a
// stateful run after resume says kernel_restarted: true (docker; the
// subprocess executor has no kernels).
func TestPauseResumeKeepsWorkspace(t *testing.T) {
	for _, tier := range []string{"docker", "subprocess"} {
		t.Run(tier, func(t *testing.T) {
			opts := envOpts{mode: "STRICT"}
			var instance string
			if tier == "docker" {
				var b [6]byte
				_, _ = rand.Read(b[:])
				instance = "api-pause-" + hex.EncodeToString(b[:])
				d := newPauseDocker(t, instance)
				opts.executors = []executors.Executor{d}
			} else {
				opts.mode = "" // the default: safe code runs in subprocess
			}
			e := newEnv(t, opts)
			const id = "wp"
			if r := e.do("PUT", "/v1/sessions/"+id+"/files/content?path=notes.txt", agentTok, "kept"); r.status/100 != 2 {
				t.Fatalf("put: %d %s", r.status, r.raw)
			}
			if tier == "docker" {
				if r := pauseCell(t, e, id, "x = 41", 60); r.body["sandbox_type"] != "docker" {
					t.Fatalf("cell: %s", r.raw)
				}
			} else {
				r := e.do("POST", "/v1/sessions/"+id+"/run_code", agentTok, runCode("print(1)", "python"))
				if r.status != 200 || r.body["sandbox_type"] != "subprocess" {
					t.Fatalf("run: %d %s", r.status, r.raw)
				}
			}
			if p := e.do("POST", "/v1/sessions/"+id+"/pause", agentTok, nil); p.status != 200 || p.body["state"] != "paused" {
				t.Fatalf("pause: %d %s", p.status, p.raw)
			}
			if tier == "docker" {
				waitContainers(t, instance, agentKey(id), 0)
			}
			if rs := e.do("POST", "/v1/sessions/"+id+"/resume", agentTok, nil); rs.status != 200 || rs.body["state"] != "active" {
				t.Fatalf("resume: %d %s", rs.status, rs.raw)
			}
			if g := e.do("GET", "/v1/sessions/"+id+"/files/content?path=notes.txt", agentTok, nil); string(g.raw) != "kept" {
				t.Fatalf("file after resume: %d %q", g.status, g.raw)
			}
			if tier == "docker" {
				r := pauseCell(t, e, id, "print('x' in dir())", 60)
				if r.body["kernel_restarted"] != true || r.body["stdout"] != "False\n" {
					t.Fatalf("first cell after resume: %s", r.raw)
				}
				// Said once.
				if r := pauseCell(t, e, id, "x = 1", 60); r.body["kernel_restarted"] != false {
					t.Fatalf("second cell after resume: %s", r.raw)
				}
			}
		})
	}
}

// TestPauseBadInput: an unknown session, another tenant's and a bad id
// get a clear error with a stable code.
func TestPauseBadInput(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, c := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/sessions/nosuch/pause", 404, "not_found"},
		{"/v1/sessions/nosuch/resume", 404, "not_found"},
		{"/v1/sessions/b~theirs/pause", 404, "not_found"},
		{"/v1/sessions/b~theirs/resume", 404, "not_found"},
		{"/v1/sessions/bad%20id/pause", 400, "invalid_request"},
	} {
		r := e.do("POST", c.path, agentTok, nil)
		if r.status != c.status || r.errCode() != c.code {
			t.Errorf("%s: %d %q, want %d %q (%s)", c.path, r.status, r.errCode(), c.status, c.code, r.raw)
		}
	}
	if r := e.do("POST", "/v1/sessions/x/pause", "", nil); r.status != 401 {
		t.Errorf("no token: %d", r.status)
	}
	// Naming a session creates none.
	if r := e.do("GET", "/v1/sessions/nosuch", agentTok, nil); r.status != 404 {
		t.Errorf("pause created the session: %d %s", r.status, r.raw)
	}
}

// TestForkGVisor: fork ×3 of a gVisor session whose kernel holds a
// DataFrame: each child reads the parent's variables and files, a write
// in one child is seen by neither the others nor the parent, the
// children's random generators differ, and each child's audit record
// names its parent and snapshot.
func TestForkGVisor(t *testing.T) {
	g, _ := newPauseGVisor(t)
	if got := g.Capabilities().Snapshot; got != executors.SnapshotMemory {
		t.Fatalf("gvisor reports snapshot %q, want memory", got)
	}
	e := newEnv(t, envOpts{mode: "STRICT", executors: []executors.Executor{g}, policyFS: routeAllTo(t, "gvisor")})
	const parent = "fp"
	if r := e.do("PUT", "/v1/sessions/"+parent+"/files/content?path=shared.txt", agentTok, "from the parent"); r.status/100 != 2 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	if r := pauseCell(t, e, parent, pandasState, 120); r.body["success"] != true {
		t.Fatalf("state: %s", r.raw)
	}
	f := e.do("POST", "/v1/sessions/"+parent+"/fork", agentTok, map[string]any{"count": 3})
	if f.status != 201 || f.body["memory"] != true || f.body["snapshot"] == "" {
		t.Fatalf("fork: %d %s", f.status, f.raw)
	}
	var kids []string
	for _, v := range f.body["sessions"].([]any) {
		kids = append(kids, obj(v)["id"].(string))
	}
	if len(kids) != 3 {
		t.Fatalf("children: %v", kids)
	}
	draws := map[string]bool{}
	for _, k := range kids {
		r := pauseCell(t, e, k, pandasRead, 60)
		if r.body["stdout"] != pandasWant || r.body["kernel_restarted"] != false {
			t.Fatalf("child %s reads: %s", k, r.raw)
		}
		if g := e.do("GET", "/v1/sessions/"+k+"/files/content?path=shared.txt", agentTok, nil); string(g.raw) != "from the parent" {
			t.Fatalf("child %s file: %d %q", k, g.status, g.raw)
		}
		r = pauseCell(t, e, k, "import random\nprint(random.random(), np.random.random())", 60)
		draws[r.body["stdout"].(string)] = true
	}
	if len(draws) != 3 {
		t.Fatalf("random draws repeat across children: %v", draws)
	}
	// A write in child 0 (a variable and a file) is its own.
	pauseCell(t, e, kids[0], "only_a = 1\nopen('/workspace/a.txt', 'w').write('a')", 60)
	for _, other := range []string{kids[1], kids[2], parent} {
		r := pauseCell(t, e, other, "import os\nprint('only_a' in dir(), os.path.exists('/workspace/a.txt'))", 60)
		if r.body["stdout"] != "False False\n" {
			t.Fatalf("%s sees child 0's write: %s", other, r.raw)
		}
	}
	a := e.do("GET", "/v1/audit?limit=200", adminTok, nil)
	if !strings.Contains(string(a.raw), `"kind":"session.fork"`) || !strings.Contains(string(a.raw), `"parent":"fp"`) {
		t.Fatalf("no session.fork audit naming the parent: %.2000s", a.raw)
	}
	for _, id := range append(kids, parent) {
		if d := e.do("DELETE", "/v1/sessions/"+id, agentTok, nil); d.status != 204 {
			t.Fatalf("delete %s: %d", id, d.status)
		}
	}
	if n := g.RestoredSandboxes(); n != 0 {
		t.Fatalf("%d restored sandboxes after deleting the family", n)
	}
}

// TestForkCopiesWorkspace: on a tier without memory the children get the
// files only; bad counts are invalid_request.
func TestForkCopiesWorkspace(t *testing.T) {
	e := newEnv(t, envOpts{mode: ""})
	if r := e.do("PUT", "/v1/sessions/fw/files/content?path=n.txt", agentTok, "kept"); r.status/100 != 2 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	f := e.do("POST", "/v1/sessions/fw/fork", agentTok, map[string]any{"count": 2})
	if f.status != 201 || f.body["memory"] != false || len(f.body["sessions"].([]any)) != 2 {
		t.Fatalf("fork: %d %s", f.status, f.raw)
	}
	for _, v := range f.body["sessions"].([]any) {
		id := obj(v)["id"].(string)
		if g := e.do("GET", "/v1/sessions/"+id+"/files/content?path=n.txt", agentTok, nil); string(g.raw) != "kept" {
			t.Fatalf("child %s: %d %q", id, g.status, g.raw)
		}
	}
	for _, c := range []any{0, 11, "x"} {
		if r := e.do("POST", "/v1/sessions/fw/fork", agentTok, map[string]any{"count": c}); r.status != 400 || r.errCode() != "invalid_request" {
			t.Errorf("count %v: %d %s", c, r.status, r.raw)
		}
	}
	if r := e.do("POST", "/v1/sessions/b~theirs/fork", agentTok, map[string]any{"count": 1}); r.status != 404 || r.errCode() != "not_found" {
		t.Errorf("another tenant's: %d %s", r.status, r.raw)
	}
}

// TestForkDropsSessionGrants: a session grant of the parent (an approval
// remembered for that session) does not apply in its child: the child's
// first HIGH run is held for a human again.
func TestForkDropsSessionGrants(t *testing.T) {
	e := newApprovalEnv(t, approvalOpts{timeout: 30 * time.Second, grants: true})
	first := e.runAsync("gf", highRisk)
	p := waitPendingAPI(t, e, 1)[0]
	if r := e.do("POST", "/v1/approvals/"+p["id"].(string)+"/decision", approverTok,
		map[string]any{"decision": "approve", "scope": "session", "for_s": 1800}); r.status != 200 {
		t.Fatalf("decision: %d %s", r.status, r.raw)
	}
	if r := first.wait(t); r.status != 200 {
		t.Fatalf("first run: %d %s", r.status, r.raw)
	}
	if r := e.runAsync("gf", highRisk).wait(t); r.status != 200 { // the grant applies in the parent
		t.Fatalf("parent's second run: %d %s", r.status, r.raw)
	}
	f := e.do("POST", "/v1/sessions/gf/fork", agentTok, map[string]any{"count": 1})
	if f.status != 201 {
		t.Fatalf("fork: %d %s", f.status, f.raw)
	}
	child := obj(f.body["sessions"].([]any)[0])["id"].(string)
	call := e.runAsync(child, highRisk)
	held := waitPendingAPI(t, e, 1)[0]
	if held["session_id"] != child {
		t.Fatalf("held %v, want the child %s", held["session_id"], child)
	}
	e.do("POST", "/v1/approvals/"+held["id"].(string)+"/decision", approverTok, map[string]any{"decision": "deny"})
	if r := call.wait(t); r.status != 403 {
		t.Fatalf("child's run after a deny: %d %s", r.status, r.raw)
	}
}

// TestMemorySessionRoutedToGVisor: with the default policy (stateful
// cells on docker), a session created with "snapshot": "memory" has its
// cells on gVisor, and a pause keeps its DataFrame; a session created
// without it keeps docker.
func TestMemorySessionRoutedToGVisor(t *testing.T) {
	g, _ := newPauseGVisor(t)
	d := newPauseDocker(t, "api-pause-route-d")
	e := newEnv(t, envOpts{mode: "STRICT", executors: []executors.Executor{d, g}})
	if r := e.do("POST", "/v1/sessions", agentTok, map[string]any{"id": "mr", "snapshot": "memory"}); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	if r := pauseCell(t, e, "mr", pandasState, 120); r.body["sandbox_type"] != "gvisor" {
		t.Fatalf("memory session's cell: %s", r.raw)
	}
	if r := pauseCell(t, e, "plain", "x = 1", 120); r.body["sandbox_type"] != "docker" {
		t.Fatalf("plain session's cell: %s", r.raw)
	}
	if p := e.do("POST", "/v1/sessions/mr/pause", agentTok, nil); p.status != 200 || p.body["state"] != "paused" {
		t.Fatalf("pause: %d %s", p.status, p.raw)
	}
	if r := pauseCell(t, e, "mr", pandasRead, 60); r.body["stdout"] != pandasWant || r.body["kernel_restarted"] != false {
		t.Fatalf("after pause: %s", r.raw)
	}
	for _, s := range []string{"mr", "plain"} {
		e.do("DELETE", "/v1/sessions/"+s, agentTok, nil)
	}
}
