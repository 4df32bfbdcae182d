package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors/executortest"
)

func TestBashExecShape(t *testing.T) {
	ts := newTestServer(t)
	r := ts.post("/v1/bash/exec", map[string]any{"command": "echo hello; pwd"})
	d := r.envelope(t, true)
	if r.status != http.StatusOK || r.body["message"] != "Operation successful" {
		t.Fatalf("status %d message %v", r.status, r.body["message"])
	}
	for _, k := range []string{"session_id", "command_id", "command", "status", "stdout", "stderr", "exit_code", "offset", "stderr_offset"} {
		if _, ok := d[k]; !ok {
			t.Errorf("data has no %q: %s", k, r.raw)
		}
	}
	if d["status"] != "completed" || num(d["exit_code"]) != 0 || d["stdout"] != "hello\n"+ts.ws+"\n" {
		t.Errorf("data %v", d)
	}
	if !hasNull(d, "stderr") {
		t.Errorf("empty stderr is not an explicit null: %s", r.raw)
	}
	if num(d["offset"]) != len("hello\n"+ts.ws+"\n") || num(d["stderr_offset"]) != 0 {
		t.Errorf("offsets %v %v", d["offset"], d["stderr_offset"])
	}
	if _, ok := d["x_sandgate"]; ok {
		t.Errorf("x_sandgate present without being asked for")
	}
}

func TestBashExecSemantics(t *testing.T) {
	ts := newTestServer(t)
	t.Run("non-zero exit is completed", func(t *testing.T) {
		d := ts.post("/v1/bash/exec", map[string]any{"command": "echo oops >&2; exit 3"}).envelope(t, true)
		if d["status"] != "completed" || num(d["exit_code"]) != 3 || d["stderr"] != "oops\n" || !hasNull(d, "stdout") {
			t.Errorf("data %v", d)
		}
	})
	t.Run("env and exec_dir", func(t *testing.T) {
		sub := filepath.Join(ts.ws, "sub")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		d := ts.post("/v1/bash/exec", map[string]any{"command": "echo $FOO; pwd", "env": map[string]string{"FOO": "bar"}, "exec_dir": sub}).envelope(t, true)
		if d["stdout"] != "bar\n"+sub+"\n" {
			t.Errorf("stdout %q", d["stdout"])
		}
		// The session keeps exec_dir as its default cwd; cd inside a
		// command does not carry over (each exec is a new process).
		sid := d["session_id"].(string)
		ts.post("/v1/bash/exec", map[string]any{"command": "cd /; pwd", "session_id": sid}).envelope(t, true)
		d = ts.post("/v1/bash/exec", map[string]any{"command": "pwd", "session_id": sid}).envelope(t, true)
		if d["stdout"] != sub+"\n" {
			t.Errorf("session cwd %q, want %q", d["stdout"], sub)
		}
	})
	t.Run("environment is not inherited", func(t *testing.T) {
		t.Setenv("SANDBOXD_CANARY", "leak")
		d := ts.post("/v1/bash/exec", map[string]any{"command": "env"}).envelope(t, true)
		out := d["stdout"].(string)
		if strings.Contains(out, "SANDBOXD_CANARY") || !strings.Contains(out, "PATH=") || !strings.Contains(out, "HOME="+ts.ws) {
			t.Errorf("env:\n%s", out)
		}
	})
	t.Run("missing exec_dir", func(t *testing.T) {
		r := ts.post("/v1/bash/exec", map[string]any{"command": "true", "exec_dir": "/no/such/dir"})
		if r.status != http.StatusBadRequest {
			t.Fatalf("status %d", r.status)
		}
		if d := r.envelope(t, false); d != nil {
			t.Errorf("data %v, want null", d)
		}
	})
	t.Run("max_output_length middle-truncates", func(t *testing.T) {
		d := ts.post("/v1/bash/exec", map[string]any{"command": "printf 'a%.0s' $(seq 1000); printf 'z'", "max_output_length": 100}).envelope(t, true)
		out := d["stdout"].(string)
		if len(out) > 100 || !strings.HasPrefix(out, "aaa") || !strings.HasSuffix(out, "az") || num(d["offset"]) != 1001 {
			t.Errorf("stdout %q (%d bytes), offset %v", out, len(out), d["offset"])
		}
	})
	t.Run("large command", func(t *testing.T) {
		cmd := "x='" + strings.Repeat("y", 200<<10) + "'\necho ${#x}"
		d := ts.post("/v1/bash/exec", map[string]any{"command": cmd}).envelope(t, true)
		if d["stdout"] != fmt.Sprint(200<<10)+"\n" {
			t.Errorf("stdout %v stderr %v", d["stdout"], d["stderr"])
		}
	})
}

func TestBashHardTimeoutKillsTree(t *testing.T) {
	ts := newTestServer(t)
	m := markers(3)
	cmd := fmt.Sprintf("sleep %s &\nsetsid sleep %s &\n( setsid sleep %s & ) &\necho spawned\nsleep 1000\n", m[0], m[1], m[2])
	start := time.Now()
	d := ts.post("/v1/bash/exec", map[string]any{"command": cmd, "hard_timeout": 1.5}).envelope(t, true)
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("exec took %v with hard_timeout 1.5", took)
	}
	if d["status"] != "timed_out" || !hasNull(d, "exit_code") || d["stdout"] != "spawned\n" {
		t.Errorf("data %v", d)
	}
	waitGone(t, m)
}

// TestBashSynchronousOnly: sandboxd's one client runs commands
// synchronously, so the detached modes (async_mode, a soft timeout that
// answers "running") are refused rather than started with no way to
// collect their output; a session runs one command at a time.
func TestBashSynchronousOnly(t *testing.T) {
	ts := newTestServer(t)
	for _, body := range []map[string]any{
		{"command": "true", "async_mode": true},
		{"command": "true", "timeout": 0.3},
	} {
		if r := ts.post("/v1/bash/exec", body); r.status != http.StatusBadRequest || r.body["success"] != false {
			t.Errorf("%v: %d %s", body, r.status, r.raw)
		}
	}
	d := ts.post("/v1/bash/exec", map[string]any{"command": "echo one; echo two >&2; exit 4"}).envelope(t, true)
	if d["status"] != "completed" || num(d["exit_code"]) != 4 || d["stdout"] != "one\n" || d["stderr"] != "two\n" {
		t.Errorf("data %v", d)
	}
	// Busy session: a second exec while the first runs is refused.
	first := make(chan reply, 1)
	go func() { first <- ts.post("/v1/bash/exec", map[string]any{"command": "sleep 5", "session_id": "busy"}) }()
	for deadline := time.Now().Add(10 * time.Second); !bashBusy(t, ts, "busy"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first command never started")
		}
	}
	if r := ts.post("/v1/bash/exec", map[string]any{"command": "true", "session_id": "busy"}); r.status != http.StatusBadRequest {
		t.Fatalf("exec on a busy session: %d %s", r.status, r.raw)
	}
	k := ts.post("/v1/bash/kill", map[string]any{"session_id": "busy", "signal": "SIGKILL"}).envelope(t, true)
	if k["status"] != "killed" {
		t.Errorf("kill %v", k)
	}
	if d := (<-first).envelope(t, true); d["status"] != "killed" {
		t.Errorf("killed command: %v", d)
	}
}

// bashBusy reports whether session id has a running command.
func bashBusy(t *testing.T, ts *testServer, id string) bool {
	t.Helper()
	r := ts.do(http.MethodGet, "/v1/bash/sessions", nil)
	var body struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(r.raw, &body); err != nil {
		t.Fatal(err)
	}
	for _, sess := range body.Data {
		if sess["session_id"] == id && sess["current_command"] != nil {
			return true
		}
	}
	return false
}

func TestBashSessions(t *testing.T) {
	ts := newTestServer(t)
	info := ts.post("/v1/bash/sessions/create", map[string]any{"session_id": "s1"}).envelope(t, true)
	for _, k := range []string{"session_id", "status", "working_dir", "created_at", "last_used_at", "current_command", "command_count"} {
		if _, ok := info[k]; !ok {
			t.Errorf("BashSessionInfo has no %q", k)
		}
	}
	if info["session_id"] != "s1" || info["status"] != "ready" || info["working_dir"] != ts.ws || !hasNull(info, "current_command") {
		t.Errorf("info %v", info)
	}
	list := ts.do(http.MethodGet, "/v1/bash/sessions", nil)
	if items, _ := list.body["data"].([]any); len(items) != 1 {
		t.Errorf("sessions %s", list.raw)
	}
	ts.post("/v1/bash/sessions/s1/close", nil).envelope(t, true)
	r := ts.post("/v1/bash/sessions/s1/close", nil)
	if r.status != http.StatusNotFound || r.body["message"] != "Session not found" {
		t.Errorf("second close: %d %s", r.status, r.raw)
	}
}

// TestRunExtension: x_sandgate returns the exact bytes, cuts the response
// at output_limit and keeps the combined output in the spill file.
func TestRunExtension(t *testing.T) {
	ts := newTestServer(t)
	spill := filepath.Join(ts.ws, ".sandgate", "outputs", "r1.log")
	cmd := `printf '\377\000ok'; printf 'E' >&2; head -c 5000 /dev/zero | tr '\0' x`
	d := ts.post("/v1/bash/exec", map[string]any{"command": cmd, "x_sandgate": map[string]any{
		"output_limit": 1000, "spill_path": spill, "spill_limit": 3000}}).envelope(t, true)
	x := d["x_sandgate"].(map[string]any)
	out, _ := base64.StdEncoding.DecodeString(x["stdout_b64"].(string))
	errb, _ := base64.StdEncoding.DecodeString(x["stderr_b64"].(string))
	if len(out) != 1000 || string(out[:4]) != "\377\000ok" || string(errb) != "E" || x["truncated"] != true {
		t.Errorf("stdout %q... (%d bytes) stderr %q truncated %v", out[:min(8, len(out))], len(out), errb, x["truncated"])
	}
	if x["spill_path"] != spill {
		t.Errorf("spill_path %v", x["spill_path"])
	}
	b, err := os.ReadFile(spill)
	// Both streams, in arrival order. They come through two pipes, so
	// stderr's E may land anywhere among stdout's bytes (CI saw it after
	// the first x's), or past the limit on a loaded machine; stdout's
	// bytes are in order.
	stdout := "\377\000ok" + strings.Repeat("x", 5000)
	if err != nil || len(b) != 3000 || strings.Count(string(b), "E") > 1 ||
		!strings.HasPrefix(stdout, strings.Replace(string(b), "E", "", 1)) {
		t.Errorf("spill file: %d bytes %q, %v", len(b), b[:min(16, len(b))], err)
	}
	// Under the limit: no spill file, spill_path null.
	d = ts.post("/v1/bash/exec", map[string]any{"command": "echo small", "x_sandgate": map[string]any{
		"output_limit": 1000, "spill_path": filepath.Join(ts.ws, "never.log"), "spill_limit": 3000, "timeout_ms": 5000}}).envelope(t, true)
	x = d["x_sandgate"].(map[string]any)
	if !hasNull(x, "spill_path") || x["truncated"] != false {
		t.Errorf("x_sandgate %v", x)
	}
	if _, err := os.Stat(filepath.Join(ts.ws, "never.log")); err == nil {
		t.Errorf("spill file written for a small output")
	}
	// A spill path outside the workspace, or a link the code planted where
	// the spill file goes, never makes sandboxd write outside it.
	outside := filepath.Join(t.TempDir(), "victim.log")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(ts.ws, ".sandgate", "outputs", "r2.log")
	if err := os.Symlink(outside, planted); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{outside, planted} {
		d = ts.post("/v1/bash/exec", map[string]any{"command": "head -c 5000 /dev/zero", "x_sandgate": map[string]any{
			"output_limit": 10, "spill_path": path, "spill_limit": 3000, "timeout_ms": 5000}}).envelope(t, true)
		x = d["x_sandgate"].(map[string]any)
		if b, _ := os.ReadFile(outside); string(b) != "keep" || x["truncated"] != true {
			t.Errorf("spill to %s: the file outside the workspace holds %d bytes; x_sandgate %v", path, len(b), x)
		}
	}
	if fi, err := os.Lstat(planted); err != nil || !fi.Mode().IsRegular() || fi.Size() != 3000 {
		t.Errorf("the planted link was not replaced by the spill file: %v %v", fi, err)
	}
}

// TestMiddleTruncate: max_output_length keeps head and tail around the
// marker and never cuts a UTF-8 sequence in two.
func TestMiddleTruncate(t *testing.T) {
	const marker = "\n... [output truncated] ...\n"
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 100, "short"},
		{"anything", 0, "anything"},
		{strings.Repeat("a", 40) + strings.Repeat("b", 40), len(marker) + 10, "aaaaa" + marker + "bbbbb"},
		{strings.Repeat("é", 40), len(marker) + 10, "éé" + marker + "éé"},
	} {
		if got := middleTruncate(tc.in, tc.n); got != tc.want {
			t.Errorf("middleTruncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestFloodDoesNotBlock: a 50 MiB flood completes and memory holds only
// the retain limit.
func TestFloodDoesNotBlock(t *testing.T) {
	ts := newTestServer(t)
	d := ts.post("/v1/bash/exec", map[string]any{"command": "head -c $((50 << 20)) /dev/zero | tr '\\0' x; echo done >&2",
		"x_sandgate": map[string]any{"output_limit": 1 << 20}, "hard_timeout": 60}).envelope(t, true)
	if d["status"] != "completed" || num(d["exit_code"]) != 0 || d["stderr"] != "done\n" {
		t.Errorf("status %v exit %v stderr %v", d["status"], d["exit_code"], d["stderr"])
	}
}

func markers(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("1000.%09d%d", rand.IntN(1e9), i)
	}
	return out
}

func waitGone(t *testing.T, m []string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		var left []string
		for _, x := range m {
			if len(executortest.ProcessesMatching(x)) > 0 {
				left = append(left, x)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still alive: %v\n%s", left, describeProcs(left))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// describeProcs tells, for a failed waitGone, what the kill sweep saw of
// each process left: its stat line and whether its environment carries a
// run marker.
func describeProcs(markers []string) string {
	var b strings.Builder
	for _, m := range markers {
		for _, pid := range executortest.ProcessesMatching(m) {
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			run, settled := runMarker(pid)
			fmt.Fprintf(&b, "%s: %s run %q (environment read: %v)\n", m, strings.TrimSpace(string(stat)), run, settled)
		}
	}
	return b.String()
}

// TestRunLimits: per-run rlimits reach the program, set by prlimit before
// a python program can start and by ulimit for a bash command.
func TestRunLimits(t *testing.T) {
	ts := newTestServer(t)
	lim := map[string]any{"max_open_files": 77, "max_file_size_mb": 3, "cpu_seconds": 9}
	d := ts.post("/v1/bash/exec", map[string]any{"command": "ulimit -n; ulimit -t; echo $(( $(ulimit -f) * 1024 ))", "x_sandgate": map[string]any{"limits": lim}}).envelope(t, true)
	if d["stdout"] != "77\n9\n3145728\n" {
		t.Errorf("bash limits: %q (stderr %v)", d["stdout"], d["stderr"])
	}
	code := "import resource as r\nfor k in (r.RLIMIT_NOFILE, r.RLIMIT_CPU, r.RLIMIT_FSIZE): print(r.getrlimit(k)[0])"
	d = ts.post("/v1/code/execute", map[string]any{"language": "python", "code": code, "x_sandgate": map[string]any{"limits": lim}}).envelope(t, true)
	if d["stdout"] != "77\n9\n3145728\n" {
		t.Errorf("python limits: %q (stderr %v)", d["stdout"], d["stderr"])
	}
	// Beyond sandboxd's own hard limit a value is clamped, not an error.
	d = ts.post("/v1/code/execute", map[string]any{"language": "python", "code": "print(1)", "x_sandgate": map[string]any{"limits": map[string]any{"max_open_files": 1 << 30}}}).envelope(t, true)
	if d["stdout"] != "1\n" {
		t.Errorf("huge limit: %v", d)
	}
}
