package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestShellUnknownID: the exact 59-byte body of the real server (deer-flow
// #1768, #3577): no hint field, and an unknown id is never auto-created.
func TestShellUnknownID(t *testing.T) {
	ts := newTestServer(t)
	const want = `{"success":false,"message":"Session not found","data":null}`
	if len(want) != 59 {
		t.Fatalf("reference body is %d bytes", len(want))
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/shell/exec", `{"command":"true","id":"no-such-session"}`},
		{"/v1/shell/view", `{"id":"no-such-session"}`},
		{"/v1/shell/kill", `{"id":"no-such-session"}`},
	} {
		r := ts.post(c.path, c.body)
		if r.status != http.StatusNotFound || string(r.raw) != want {
			t.Errorf("%s: %d %s", c.path, r.status, r.raw)
		}
	}
	if r := ts.do(http.MethodDelete, "/v1/shell/sessions/no-such-session", nil); r.status != http.StatusNotFound || string(r.raw) != want {
		t.Errorf("delete: %d %s", r.status, r.raw)
	}
	// Still unknown afterwards.
	if r := ts.post("/v1/shell/exec", `{"command":"true","id":"no-such-session"}`); r.status != http.StatusNotFound {
		t.Errorf("the failed exec created the session: %d", r.status)
	}
}

func TestShellPersistentSession(t *testing.T) {
	ts := newTestServer(t)
	c := ts.post("/v1/shell/sessions/create", map[string]any{"id": "s1"}).envelope(t, true)
	if c["session_id"] != "s1" || c["working_dir"] != ts.ws {
		t.Fatalf("create %v", c)
	}
	exec := func(cmd string, extra ...any) map[string]any {
		t.Helper()
		body := map[string]any{"command": cmd, "id": "s1"}
		for i := 0; i+1 < len(extra); i += 2 {
			body[extra[i].(string)] = extra[i+1]
		}
		return ts.post("/v1/shell/exec", body).envelope(t, true)
	}
	d := exec("mkdir -p sub && cd sub && export GREETING=hi && f() { echo fn-$1; }")
	for _, k := range []string{"session_id", "command", "status", "output", "console", "exit_code"} {
		if _, ok := d[k]; !ok {
			t.Errorf("ShellCommandResult has no %q", k)
		}
	}
	if d["status"] != "completed" || num(d["exit_code"]) != 0 {
		t.Fatalf("data %v", d)
	}
	d = exec("pwd; echo $GREETING; f x; echo err >&2; false")
	if d["output"] != ts.ws+"/sub\nhi\nfn-x\nerr\n" || num(d["exit_code"]) != 1 {
		t.Errorf("state not kept: output %q exit %v", d["output"], d["exit_code"])
	}
	console := d["console"].([]any)
	if len(console) != 1 || !strings.HasSuffix(console[0].(map[string]any)["ps1"].(string), ts.ws+"/sub $") {
		t.Errorf("console %v", console)
	}
	// A syntax error does not wedge the session.
	d = exec("echo 'unterminated")
	if d["status"] != "completed" || num(d["exit_code"]) == 0 {
		t.Errorf("syntax error: %v", d)
	}
	// A command reading stdin gets EOF, not the next command.
	d = exec("cat; echo after-cat")
	if d["output"] != "after-cat\n" {
		t.Errorf("stdin: %q", d["output"])
	}
	// A bare exit ends the shell (upstream hangs: deer-flow #5546); the
	// command completes and the next one gets a fresh shell in the same cwd.
	d = exec("echo bye; exit 7")
	if d["status"] != "completed" || num(d["exit_code"]) != 7 || d["output"] != "bye\n" {
		t.Errorf("exit: %v", d)
	}
	d = exec("pwd")
	if d["output"] != ts.ws+"/sub\n" {
		t.Errorf("after exit: %v", d)
	}
	// Output without a final newline is kept as is.
	d = exec("printf abc")
	if d["output"] != "abc" {
		t.Errorf("no newline: %q", d["output"])
	}
	// Creating an existing id returns that session.
	c = ts.post("/v1/shell/sessions/create", map[string]any{"id": "s1"}).envelope(t, true)
	if c["working_dir"] != ts.ws+"/sub" {
		t.Errorf("re-create %v", c)
	}
	ts.do(http.MethodDelete, "/v1/shell/sessions/s1", nil).envelope(t, true)
	if r := ts.post("/v1/shell/exec", map[string]any{"command": "true", "id": "s1"}); r.status != http.StatusNotFound {
		t.Errorf("exec after delete: %d", r.status)
	}
}

func TestShellTimeouts(t *testing.T) {
	ts := newTestServer(t)
	ts.post("/v1/shell/sessions/create", map[string]any{"id": "s"}).envelope(t, true)
	m := markers(2)
	start := time.Now()
	d := ts.post("/v1/shell/exec", map[string]any{"id": "s", "hard_timeout": 1,
		"command": fmt.Sprintf("setsid sleep %s & sleep %s; echo never", m[0], m[1])}).envelope(t, true)
	if d["status"] != "hard_timeout" || time.Since(start) > 5*time.Second {
		t.Errorf("hard timeout: %v after %v", d, time.Since(start))
	}
	waitGone(t, m)
	// The session survives with a fresh shell.
	if d := ts.post("/v1/shell/exec", map[string]any{"id": "s", "command": "echo alive"}).envelope(t, true); d["output"] != "alive\n" {
		t.Errorf("after hard timeout: %v", d)
	}
	// Soft timeout: running, output null; view shows it finishing.
	d = ts.post("/v1/shell/exec", map[string]any{"id": "s", "command": "sleep 1; echo done", "timeout": 0.2}).envelope(t, true)
	if d["status"] != "running" || !hasNull(d, "output") || !hasNull(d, "exit_code") {
		t.Errorf("soft timeout %v", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := ts.post("/v1/shell/view", map[string]any{"id": "s"}).envelope(t, true)
		if v["status"] == "completed" {
			if v["output"] != "done\n" {
				t.Errorf("view %v", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("view never completed: %v", v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// no_change_timeout: returns while the command keeps running.
	d = ts.post("/v1/shell/exec", map[string]any{"id": "s", "command": "echo x; sleep 30", "no_change_timeout": 1}).envelope(t, true)
	if d["status"] != "no_change_timeout" {
		t.Errorf("no change: %v", d)
	}
	k := ts.post("/v1/shell/kill", map[string]any{"id": "s"}).envelope(t, true)
	if k["status"] != "terminated" {
		t.Errorf("kill %v", k)
	}
}

// TestShellSerialises: concurrent execs on one session run one after the
// other, each seeing its own output (no ErrorObservation, deer-flow #1433).
func TestShellSerialises(t *testing.T) {
	ts := newTestServer(t)
	ts.post("/v1/shell/sessions/create", map[string]any{"id": "p"}).envelope(t, true)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := range 8 {
		wg.Go(func() {
			d := ts.post("/v1/shell/exec", map[string]any{"id": "p", "command": fmt.Sprintf("echo start-%d; sleep 0.05; echo end-%d", i, i)}).envelope(t, true)
			if want := fmt.Sprintf("start-%d\nend-%d\n", i, i); d["output"] != want {
				errs <- fmt.Sprintf("exec %d: %q", i, d["output"])
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// Id-less execs share one implicit session.
	ts.post("/v1/shell/exec", map[string]any{"command": "export SHARED=1"}).envelope(t, true)
	if d := ts.post("/v1/shell/exec", map[string]any{"command": "echo $SHARED"}).envelope(t, true); d["output"] != "1\n" {
		t.Errorf("implicit session: %v", d)
	}
	list := ts.do(http.MethodGet, "/v1/shell/sessions", nil).envelope(t, true)
	if s, _ := list["sessions"].(map[string]any); len(s) != 2 {
		t.Errorf("sessions %v", list)
	}
}
