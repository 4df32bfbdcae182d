package docker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestSessionSandbox runs a session's commands in its session sandbox
// (Layout.SessionSandbox, E2B's): under runc and under gVisor, a file one
// command writes to /tmp is read by the next, a module "installed" in
// the user site (~/.local, where pip install --user puts it) is imported
// by the next, a background server one command starts is seen by ps and
// answers on loopback in the next; a command that times out loses its
// whole tree (a setsid'd grandchild included) while what earlier
// commands left runs on; the sandbox is one container, removed when the
// session is released.
func TestSessionSandbox(t *testing.T) {
	for _, rt := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"runc", func(*Config) {}},
		{"gvisor", func(c *Config) { c.Runtime, c.OwnKernel, c.Kind = "runsc", true, executors.KindGVisor }},
	} {
		t.Run(rt.name, func(t *testing.T) {
			e := newTestExecutor(t, shippedWarmAfter, rt.cfg)
			if rt.name == "gvisor" {
				if err := e.Available(t.Context()); errors.Is(err, ErrRuntimeMissing) {
					if os.Getenv("SANDGATE_REQUIRE_GVISOR") == "1" {
						t.Fatalf("gVisor required: %v", err)
					}
					t.Skipf("no runsc runtime: %v", err)
				}
			}
			if !e.Capabilities().SessionSandbox {
				t.Fatal("the executor does not report session_sandbox")
			}
			checkSessionSandbox(t, e)
		})
	}
}

// TestSessionSandboxFromPool: under runc, once a session asked for a
// sandbox of a shape, the pool keeps sandboxes of that shape ready, and
// the next session's sandbox is one of them, claimed rather than
// created, and a session sandbox in every way checkSessionSandbox checks
// (gVisor's session sandboxes are not pooled: poolsandbox.go).
func TestSessionSandboxFromPool(t *testing.T) {
	needRoot(t)
	e := newTestExecutor(t, withPool(t, 1, 4))
	first := spec(t, executors.LangBash, "true")
	first.Layout = executors.Layout{Root: "/home/user", Workdir: "/home/user", SessionSandbox: true}
	if res := execute(t, e, first); res.ExitCode != 0 {
		t.Fatalf("the first session's command: %+v", res)
	}
	if err := e.ReleaseSession(t.Context(), first.SessionID); err != nil {
		t.Fatal(err)
	}
	readyPool(t, e, 2) // the default shape's and the sandbox shape's
	before := e.PoolStatus().Claims
	checkSessionSandbox(t, e)
	if st := e.PoolStatus(); st.Claims != before+1 {
		t.Fatalf("the second session's sandbox was not claimed from the pool: %+v (claims before: %d)", st, before)
	}
}

func checkSessionSandbox(t *testing.T, e *Executor) {
	base := spec(t, executors.LangBash, "")
	base.Layout = executors.Layout{Root: "/home/user", Workdir: "/home/user", SessionSandbox: true}
	run := func(code string, timeout time.Duration) executors.Result {
		t.Helper()
		s := base
		s.RequestID, s.Code, s.Timeout = "req-"+executortest.Nonce(), code, timeout
		return execute(t, e, s)
	}
	// Under runc with slots (a root gateway) the sandbox's process
	// server starts each command; otherwise the engine does (an exec,
	// whose parent is outside the sandbox: ppid 0).
	starter := "engine"
	if e.procServers() {
		starter = procServerDir
	}
	steps := []struct {
		name, code string
		want       string
	}{
		{"pid 1 reaps orphans", "ps -o comm= -p 1", "docker-init"},
		{"who started the command", `p=$(ps -o ppid= -p $PPID | tr -d ' '); if [ "$p" = 0 ]; then echo engine; else tr '\0' '\n' </proc/$p/cmdline | tail -n 1; fi`, starter},
		// The sandbox's own processes (pid 1 and the process server or the
		// placeholder) are not the session's uid: no command can kill them.
		{"the sandbox's processes are not the session's", `ps -eo uid= | tr -d ' ' | grep -vcx "$(id -u)"`, "2"},
		{"a command holds no capability", `grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status | awk '{print $2}' | sort -u`, "0000000000000000"},
		// What an exec gave a command, whether the sandbox's process server
		// started it or the engine did (procserver.go).
		{"the command's environment", "env | cut -d= -f1 | sort | paste -sd' ' -", "HOME HOSTNAME LANG NODE_PATH PATH PWD SANDGATE_RUN SHLVL _"},
		{"its gid is its only group", `[ "$(id -G)" = "$(id -g)" ] && [ "$(id -g)" != 0 ] && echo ok`, "ok"},
		{"a session of its own", `[ "$(ps -o sid= -p $$ | tr -d ' ')" = "$(ps -o pgid= -p $$ | tr -d ' ')" ] && echo ok`, "ok"},
		{"tmp written", "echo kept-in-tmp >/tmp/persist.txt && echo ok", "ok"},
		{"tmp read", "cat /tmp/persist.txt", "kept-in-tmp"},
		{"user site written", `d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p "$d" && echo 'X = "from-user-site"' >"$d/sgmod.py" && echo ok`, "ok"},
		{"user site imported", `python3 -c 'import sgmod; print(sgmod.X)'`, "from-user-site"},
		{"server started", `nohup python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &
for i in $(seq 50); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8765), 1)' 2>/dev/null && break; sleep 0.1; done; echo ok`, "ok"},
		{"server seen by ps", "ps -eo args | grep -c '[h]ttp.server 8765'", "1"},
		{"server answers", `curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8765/`, "200"},
	}
	for _, s := range steps {
		res := run(s.code, 30*time.Second)
		if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != s.want {
			t.Fatalf("%s: exit %d, stdout %q (want %q), stderr %q", s.name, res.ExitCode, res.Stdout, s.want, res.Stderr)
		}
	}
	// 600 kB in one write: nothing lost to a runtime's short writes.
	if res := run(`python3 -c "import sys; sys.stdout.write('x' * 600000)"`, 30*time.Second); len(res.Stdout) != 600000 || res.ExitCode != 0 {
		t.Fatalf("a large write: %d bytes of stdout, exit %d", len(res.Stdout), res.ExitCode)
	}
	res := run("setsid sh -c 'exec sleep 1001' </dev/null >/dev/null 2>&1 & sleep 100", 2*time.Second)
	if !res.TimedOut || res.ExitCode != executors.ExitCodeTimeout {
		t.Fatalf("timeout: %+v", res)
	}
	res = run("ps -eo args", 30*time.Second)
	if strings.Contains(res.Stdout, "sleep 1001") || strings.Contains(res.Stdout, "sleep 100") {
		t.Errorf("the timed-out command's tree survived:\n%s", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "http.server 8765") {
		t.Errorf("the earlier command's server died with the timed-out one:\n%s", res.Stdout)
	}
	boxes := claimedSandboxes(t, e)
	if len(boxes) != 1 {
		t.Fatalf("session sandboxes: %v, want one", boxes)
	}
	if err := e.ReleaseSession(t.Context(), base.SessionID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(claimedSandboxes(t, e)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session sandbox outlived the session's release")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// claimedSandboxes lists e's session sandboxes, but for those idle in
// its pool.
func claimedSandboxes(t testing.TB, e *Executor) []string {
	t.Helper()
	idle := map[string]bool{}
	e.pool.mu.Lock()
	for _, k := range e.pool.keys {
		for _, b := range k.idle {
			idle[shortID(b.id)] = true
		}
	}
	e.pool.mu.Unlock()
	return slices.DeleteFunc(sandboxContainers(t, e.cfg.Instance), func(id string) bool { return idle[shortID(id)] })
}

// sandboxContainers lists an instance's session sandboxes.
func sandboxContainers(t testing.TB, instance string) []string {
	t.Helper()
	var out []string
	for _, id := range instanceContainers(t, instance) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		b, err := exec.CommandContext(ctx, "docker", "inspect", "-f", `{{index .Config.Labels "`+labelSandbox+`"}}`, id).Output()
		cancel()
		if err == nil && strings.TrimSpace(string(b)) == "true" {
			out = append(out, id)
		}
	}
	return out
}

// BenchmarkSessionSandbox times one command in a session sandbox (an
// exec of python3 printing 1) against `docker exec <the sandbox> python3
// -c 'print(1)'` through the CLI on the same container, back to back in
// each iteration so both see the same load; the sandbox's creation (the
// session's first command) is outside the timing.
//
//	go test -run '^$' -bench SessionSandbox -benchtime 30x ./executors/docker/
func BenchmarkSessionSandbox(b *testing.B) {
	e := newTestExecutor(b, shippedWarmAfter)
	s := spec(b, executors.LangPython, "print(1)")
	s.Layout = executors.Layout{SessionSandbox: true}
	execute(b, e, s)
	box := sandboxContainers(b, e.cfg.Instance)
	if len(box) != 1 {
		b.Fatalf("sandboxes %v", box)
	}
	var ours, cli []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s.RequestID = "req-" + executortest.Nonce()
		if res := execute(b, e, s); res.Stdout != "1\n" {
			b.Fatalf("%+v", res)
		}
		ours = append(ours, time.Since(t0))
		t0 = time.Now()
		if out, err := exec.Command("docker", "exec", "-u", "65534", box[0], "python3", "-c", "print(1)").Output(); err != nil || string(out) != "1\n" {
			b.Fatalf("docker exec: %q %v", out, err)
		}
		cli = append(cli, time.Since(t0))
	}
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	o, c := p50(ours), p50(cli)
	b.ReportMetric(float64(o.Milliseconds()), "ms-p50")
	b.ReportMetric(float64(c.Milliseconds()), "cli-ms-p50")
	b.ReportMetric(float64(o)/float64(c), "x-cli")
}

// TestSessionSandboxReapedAtStart: a session sandbox a gateway left
// behind (it crashed: no release, no Close) is removed by the next start
// of the same instance, as every container of the executor is.
func TestSessionSandboxReapedAtStart(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	s := spec(t, executors.LangBash, "nohup sleep 600 >/dev/null 2>&1 & echo ok")
	s.Layout = executors.Layout{SessionSandbox: true}
	if res := execute(t, e, s); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	if n := len(sandboxContainers(t, e.cfg.Instance)); n != 1 {
		t.Fatalf("%d session sandboxes, want 1", n)
	}
	next, err := New(t.Context(), Config{Instance: e.cfg.Instance, Logger: testLogger(t), Pool: noPool})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	for len(sandboxContainers(t, e.cfg.Instance)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the next start of the instance left the session sandbox")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
