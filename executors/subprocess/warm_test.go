package subprocess

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// warmUID is the sandbox uid of the warm tests' executors: a uid of their
// own, so RLIMIT_NPROC and the /proc checks are not shared with other
// tests, or with the sandboxes of packages tested in parallel (subprocess
// 60000, docker 61000, aio 62000, TestForkBombContained 64100+). The
// tests use warmUID..warmUID+899, within 63000–63899.
var warmUID = 63000 + os.Getpid()%300

// newWarmExecutor is newTestExecutor with warm interpreters on, zygotes
// off (so Python runs use warm interpreters too) and the sandbox uid
// warmUID.
func newWarmExecutor(t *testing.T, mutate ...func(*Config)) *Executor {
	t.Helper()
	return newTestExecutor(t, append([]func(*Config){func(c *Config) {
		c.SandboxUID, c.SandboxGID = warmUID, warmUID
		c.DisableZygote = true // zygote_test.go covers Python's zygotes
	}}, mutate...)...)
}

// waitWarm waits until session has a warm interpreter in the pool and,
// with ready, until its bootstrap is waiting for the hand-off.
func waitWarm(t *testing.T, e *Executor, session string, ready bool) *warmProc {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		e.warm.mu.Lock()
		var w *warmProc
		if s := e.warm.sessions[session]; s != nil {
			w = s.warm
		}
		e.warm.mu.Unlock()
		if w != nil && (!ready || closed(w.ready)) {
			return w
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("session %s: no warm interpreter", session)
	return nil
}

// warmSpec returns a run of code in session sess and workspace ws.
func warmRun(sess, ws, lang, code string) executors.Spec {
	return executors.Spec{RequestID: "req-" + executortest.Nonce(), SessionID: sess, Language: lang,
		Code: code, Timeout: 30 * time.Second, WorkspaceDir: ws}
}

func mustExecute(t *testing.T, e *Executor, spec executors.Spec) executors.Result {
	t.Helper()
	res, err := e.Execute(t.Context(), spec)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return res
}

// TestWarmServesNextRun: a session's second run is served by the warm
// interpreter its first run left, in every language; one that was
// prewarmed is served from its first run; and what the program sees is
// what it sees cold (TestWarmMatchesCold compares in detail).
func TestWarmServesNextRun(t *testing.T) {
	e := newWarmExecutor(t)
	for _, tc := range []struct{ lang, code, want string }{
		{executors.LangPython, "import sys\nprint('ok', sys.argv[0].startswith('/run/sandgate/code/'))\n", "ok True\n"},
		{executors.LangBash, "echo ok \"${0%/*}\"\n", "ok /run/sandgate/code\n"},
		{executors.LangJavaScript, "console.log('ok', require.main === module)\n", "ok true\n"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
			before := e.WarmStats()
			if res := mustExecute(t, e, warmRun(sess, ws, tc.lang, tc.code)); res.Stdout != tc.want {
				t.Fatalf("cold run: %+v", res)
			}
			waitWarm(t, e, sess, false)
			res := mustExecute(t, e, warmRun(sess, ws, tc.lang, tc.code))
			after := e.WarmStats()
			if res.Stdout != tc.want || res.Stderr != "" || res.ExitCode != 0 {
				t.Errorf("warm run: %+v", res)
			}
			if after.Hits != before.Hits+1 || after.Misses != before.Misses+1 {
				t.Errorf("stats before %+v after %+v: want one miss (the first run) and one hit", before, after)
			}

			sess2, ws2 := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
			spec := warmRun(sess2, ws2, tc.lang, tc.code)
			if err := e.Prewarm(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			if res := mustExecute(t, e, spec); res.Stdout != tc.want || e.WarmStats().Hits != after.Hits+1 {
				t.Errorf("prewarmed first run: %+v, stats %+v", res, e.WarmStats())
			}
		})
	}
}

// fidelityCase is a program whose whole result must be the same cold and
// warm.
type fidelityCase struct {
	name, lang, code string
	files            map[string]string // written into the workspace first
}

var fidelityCases = []fidelityCase{
	{name: "interpreter state", lang: executors.LangPython, code: `import os, sys
print(sys.argv, sys.orig_argv[1:], sys.path, sys.flags)
print(list(globals()), __name__, __file__, __spec__, __cached__, __package__, __doc__, type(__loader__).__name__, __loader__.name, __loader__.path)
print(len(sys.modules), sorted(sys.modules))
print(os.getpid(), os.getppid(), sorted(os.listdir("/proc/self/fd")), repr(sys.stdin.read()), sys.stdin.seekable())
print(sorted(os.environ.items()), os.getcwd(), os.umask(0o22))
print(open("/proc/self/limits").read())
print([l for l in open("/proc/self/status") if l.split(":")[0] in ("Uid", "Gid", "Groups", "NoNewPrivs", "Threads")])
print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
`},
	{name: "traceback", lang: executors.LangPython, code: "def f():\n    raise ValueError('boom')\nprint('before')\nf()\n"},
	{name: "chained traceback", lang: executors.LangPython, code: "try:\n    1/0\nexcept Exception as e:\n    raise KeyError('k') from e\n"},
	{name: "syntax error", lang: executors.LangPython, code: "print('a')\nx = = 1\n"},
	{name: "exit code", lang: executors.LangPython, code: "import sys\nprint('e')\nsys.exit(3)\n"},
	{name: "exit message", lang: executors.LangPython, code: "import sys\nsys.exit('bye')\n"},
	{name: "keyboard interrupt", lang: executors.LangPython, code: "raise KeyboardInterrupt\n"},
	{name: "atexit after error", lang: executors.LangPython, code: `import atexit, sys
atexit.register(lambda: print("atexit", "__file__" in globals(), sys.last_type.__name__, sys.excepthook is sys.__excepthook__, sorted(globals())))
raise RuntimeError("r")
`},
	{name: "atexit after exit", lang: executors.LangPython, code: "import atexit, sys\natexit.register(lambda: print('atexit', '__file__' in globals()))\nsys.exit(0)\n"},
	{name: "failing excepthook", lang: executors.LangPython, code: "import sys\ndef h(*a):\n    raise TypeError('hook')\nsys.excepthook = h\n1/0\n"},
	{name: "thread outlives error", lang: executors.LangPython, code: "import threading, time\ndef w():\n    time.sleep(0.2)\n    print('thread done')\nthreading.Thread(target=w).start()\nraise ValueError('main')\n"},
	{name: "killed by a signal", lang: executors.LangPython, code: "import os\nprint('x')\nos.kill(os.getpid(), 9)\n"},
	{name: "terminated", lang: executors.LangPython, code: "import os, signal\nsignal.signal(signal.SIGTERM, signal.SIG_DFL)\nos.kill(os.getpid(), signal.SIGTERM)\n"},
	{name: "default SIGINT", lang: executors.LangPython, code: "import os, signal\nsignal.signal(signal.SIGINT, signal.SIG_DFL)\nos.kill(os.getpid(), signal.SIGINT)\n"},
	{name: "background child", lang: executors.LangPython, code: "import subprocess\nsubprocess.Popen(['sleep', '30'])\nprint('left')\n"},
	{name: "warning", lang: executors.LangPython, code: "import warnings\nwarnings.warn('w1')\n"},
	{name: "encoding cookie", lang: executors.LangPython, code: "# -*- coding: latin-1 -*-\nprint('\xe9')\n"},
	{name: "docstring and annotations", lang: executors.LangPython, code: "'''doc'''\nx: int = 1\nprint(__doc__, __annotations__)\n"},
	{name: "spawned multiprocessing", lang: executors.LangPython, code: "import multiprocessing as mp\ndef sq(x):\n    return x * x\nif __name__ == '__main__':\n    with mp.get_context('spawn').Pool(2) as p:\n        print(p.map(sq, [1, 2, 3]))\n"},

	{name: "shell state", lang: executors.LangBash, code: `echo "$0" "$BASH_SOURCE" "$-" "$SHLVL" "${BASH_EXECUTION_STRING-unset}" $$ $PPID
env | sort
tr '\0' '\n' < /proc/$$/environ
tr '\0' ' ' < /proc/$$/cmdline; echo
ls /proc/self/fd
cat /proc/self/limits
grep -E '^(Uid|Gid|Groups|NoNewPrivs):' /proc/self/status
cat
`},
	{name: "errors", lang: executors.LangBash, code: "nosuchcommand\necho after\nreturn 3\nexit 4\n"},

	{name: "process state", lang: executors.LangJavaScript, code: `const fs = require('fs');
console.log(process.argv.slice(1), process.execArgv, process.argv0, require.main === module, module.id, __filename, __dirname);
console.log(Object.keys(require.cache), Object.keys(process).sort().join(','), process._preload_modules);
// Node 18 (the runtime root's) loads a few more internal modules under
// the warm preload (doc.go); the count is compared from Node 20 on.
console.log(parseInt(process.versions.node) >= 20 ? process.moduleLoadList.length : 'n/a', process.pid, process.ppid, fs.readdirSync('/proc/self/fd').length);
console.log(Object.entries(process.env).sort(), process.cwd(), module.paths.slice(0, 2));
`},
	{name: "uncaught error", lang: executors.LangJavaScript, code: "console.log('x');\nfunction f() { throw new Error('boom'); }\nf();\n"},
	{name: "syntax error", lang: executors.LangJavaScript, code: "let x = = 1;\n"},
	{name: "exit code", lang: executors.LangJavaScript, code: "process.exitCode = 3;\n"},
	{name: "unhandled rejection", lang: executors.LangJavaScript, code: "Promise.reject(new Error('rej'));\n"},
	{name: "worker thread", lang: executors.LangJavaScript, code: "const { Worker } = require('worker_threads');\nnew Worker('console.log(process.execArgv, Object.keys(require.cache))', { eval: true });\n"},
	{name: "child inherits execArgv", lang: executors.LangJavaScript, code: "const cp = require('child_process');\nprocess.stdout.write(cp.execFileSync(process.execPath, [...process.execArgv, '-e', 'console.log(process.execArgv)']));\n"},
	{name: "ES module by package.json", lang: executors.LangJavaScript, files: map[string]string{"package.json": `{"type": "module"}`},
		code: "import fs from 'fs';\nconsole.log(import.meta.url, typeof fs.readFileSync, typeof require);\n"},
}

// TestWarmMatchesCold runs each fidelity program cold and warm (with the
// same request id, in twin workspaces) and requires the same result.
func TestWarmMatchesCold(t *testing.T) {
	cold := newWarmExecutor(t, func(c *Config) { c.DisableWarm = true })
	warm := newWarmExecutor(t)
	for _, tc := range fidelityCases {
		t.Run(tc.lang+"/"+tc.name, func(t *testing.T) {
			id := "req-" + executortest.Nonce()
			results := make([]executors.Result, 2)
			for i, e := range []*Executor{cold, warm} {
				ws := executortest.NewWorkspace(t)
				for name, content := range tc.files {
					if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				spec := warmRun("sess-"+executortest.Nonce(), ws, tc.lang, tc.code)
				spec.RequestID = id
				if e == warm {
					if err := e.Prewarm(t.Context(), spec); err != nil {
						t.Fatal(err)
					}
					waitWarm(t, e, spec.SessionID, true)
				}
				hits := e.WarmStats().Hits
				results[i] = mustExecute(t, e, spec)
				if e == warm && e.WarmStats().Hits != hits+1 {
					t.Fatalf("the warm run was not served warm: %+v", e.WarmStats())
				}
			}
			c, w := results[0], results[1]
			c.Duration, w.Duration = 0, 0
			if c != w {
				t.Errorf("cold and warm differ\ncold exit %d stdout:\n%s\nstderr:\n%s\nwarm exit %d stdout:\n%s\nstderr:\n%s",
					c.ExitCode, c.Stdout, c.Stderr, w.ExitCode, w.Stdout, w.Stderr)
			}
		})
	}
}

// TestWarmMismatchGoesCold: a run whose parameters differ from the warm
// interpreter's kills it and runs cold (and correctly); output caps are
// the run's own and still hit.
func TestWarmMismatchGoesCold(t *testing.T) {
	e := newWarmExecutor(t)
	code := map[string]string{
		executors.LangPython:     "print('ran')\n",
		executors.LangBash:       "echo ran\n",
		executors.LangJavaScript: "console.log('ran')\n",
	}
	for _, tc := range []struct {
		name   string
		mutate func(s *executors.Spec, t *testing.T)
		hit    bool
	}{
		{"language", func(s *executors.Spec, _ *testing.T) {
			s.Language, s.Code = executors.LangBash, code[executors.LangBash]
		}, false},
		{"uid", func(s *executors.Spec, _ *testing.T) { s.UID, s.GID = warmUID+600, warmUID+600 }, false},
		{"workspace", func(s *executors.Spec, t *testing.T) { s.WorkspaceDir = executortest.NewWorkspace(t) }, false},
		{"network", func(s *executors.Spec, _ *testing.T) { s.Network, s.Egress = true, executortest.NewTestProxy() }, false},
		{"memory", func(s *executors.Spec, _ *testing.T) { s.Limits.MemoryMB = 900 }, false},
		{"cpu", func(s *executors.Spec, _ *testing.T) { s.Limits.CPUSeconds = 7 }, false},
		{"procs", func(s *executors.Spec, _ *testing.T) { s.Limits.MaxProcs = 77 }, false},
		{"files", func(s *executors.Spec, _ *testing.T) { s.Limits.MaxOpenFiles = 99 }, false},
		{"file size", func(s *executors.Spec, _ *testing.T) { s.Limits.MaxFileSizeMB = 9 }, false},
		{"output cap", func(s *executors.Spec, _ *testing.T) { s.Limits.MaxOutputBytes = 3 }, true},
		{"timeout", func(s *executors.Spec, _ *testing.T) { s.Timeout = 20 * time.Second }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := executortest.NewWorkspace(t)
			base := warmRun("sess-"+executortest.Nonce(), ws, executors.LangPython, code[executors.LangPython])
			if err := e.Prewarm(t.Context(), base); err != nil {
				t.Fatal(err)
			}
			waitWarm(t, e, base.SessionID, true)
			old := processesInDir(ws)
			if len(old) == 0 {
				t.Fatal("no warm process found in the workspace")
			}
			spec := base
			spec.RequestID = "req-" + executortest.Nonce()
			tc.mutate(&spec, t)
			before := e.WarmStats()
			res := mustExecute(t, e, spec)
			after := e.WarmStats()
			want := "ran\n"
			if spec.Limits.MaxOutputBytes == 3 {
				want = "ran"
			}
			if res.Stdout != want || res.ExitCode != 0 {
				t.Errorf("result %+v", res)
			}
			if hit := after.Hits == before.Hits+1; hit != tc.hit {
				t.Errorf("served warm: %v, want %v (stats %+v → %+v)", hit, tc.hit, before, after)
			}
			if !tc.hit {
				if after.Mismatched != before.Mismatched+1 {
					t.Errorf("Mismatched %d → %d, want one more", before.Mismatched, after.Mismatched)
				}
				if left := stillAlive(old); len(left) > 0 {
					t.Errorf("the mismatched warm processes %v are still alive", left)
				}
			}
		})
	}
}

// stillAlive returns which of pids are live, non-zombie processes.
func stillAlive(pids []string) []string {
	var left []string
	for _, pid := range pids {
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err == nil && !strings.Contains(string(status), "\nState:\tZ") {
			left = append(left, pid)
		}
	}
	return left
}

// TestWarmNeverCrossesSessions: a run of another session never gets a
// session's warm interpreter, even with otherwise identical parameters
// (the same workspace and uid), and leaves it waiting for its own session.
func TestWarmNeverCrossesSessions(t *testing.T) {
	e := newWarmExecutor(t)
	ws := executortest.NewWorkspace(t)
	mine := warmRun("sess-a-"+executortest.Nonce(), ws, executors.LangPython, "import os\nprint(os.getpid())\n")
	if err := e.Prewarm(t.Context(), mine); err != nil {
		t.Fatal(err)
	}
	w := waitWarm(t, e, mine.SessionID, true)
	other := mine
	other.SessionID, other.RequestID = "sess-b-"+executortest.Nonce(), "req-"+executortest.Nonce()
	hits := e.WarmStats().Hits
	mustExecute(t, e, other)
	if e.WarmStats().Hits != hits {
		t.Fatalf("another session was served warm: %+v", e.WarmStats())
	}
	if got := waitWarm(t, e, mine.SessionID, true); got != w {
		t.Fatal("the session's warm interpreter was replaced")
	}
	if mustExecute(t, e, mine); e.WarmStats().Hits != hits+1 {
		t.Errorf("the session's own run was not served warm: %+v", e.WarmStats())
	}
	t.Run("no session id", func(t *testing.T) {
		waitWarm(t, e, mine.SessionID, false)
		waitWarm(t, e, other.SessionID, false)
		spec := mine
		spec.SessionID = ""
		before := e.WarmStats()
		mustExecute(t, e, spec)
		time.Sleep(100 * time.Millisecond)
		if after := e.WarmStats(); after != before {
			t.Errorf("a run without a session touched the pool: %+v → %+v", before, after)
		}
	})
}

// TestWarmReleaseAndClose: ReleaseSession and Close return only once the
// warm processes are gone (looked up in /proc by their cwd, the workspace),
// and kill only what they should.
func TestWarmReleaseAndClose(t *testing.T) {
	e := newWarmExecutor(t)
	langs := []string{executors.LangPython, executors.LangBash, executors.LangJavaScript}
	var sessions []executors.Spec
	for i := range 6 {
		spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), langs[i%3], "")
		if err := e.Prewarm(t.Context(), spec); err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, spec)
	}
	for _, s := range sessions {
		waitWarm(t, e, s.SessionID, true)
		if len(processesInDir(s.WorkspaceDir)) != 2 {
			t.Fatalf("%s: processes %v in the workspace, want the init step and the interpreter", s.Language, processesInDir(s.WorkspaceDir))
		}
	}
	for _, s := range sessions[:3] {
		if err := e.ReleaseSession(t.Context(), s.SessionID); err != nil {
			t.Fatal(err)
		}
		if left := processesInDir(s.WorkspaceDir); len(left) > 0 {
			t.Errorf("%s: processes %v left after ReleaseSession", s.Language, left)
		}
	}
	if err := e.ReleaseSession(t.Context(), "sess-unknown"); err != nil {
		t.Errorf("ReleaseSession of an unknown session: %v", err)
	}
	for _, s := range sessions[3:] {
		if len(processesInDir(s.WorkspaceDir)) != 2 {
			t.Errorf("%s: another session's release killed this one's warm interpreter", s.Language)
		}
	}
	boot := e.nodeBoot.dir
	if err := e.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		if left := processesInDir(s.WorkspaceDir); len(left) > 0 {
			t.Errorf("%s: processes %v left after Close", s.Language, left)
		}
	}
	if _, err := os.Stat(boot); boot == "" || !os.IsNotExist(err) {
		t.Errorf("warm directory %q: %v, want it removed", boot, err)
	}
	// After Close, runs still work, cold, and start nothing.
	s := sessions[0]
	s.Code, s.RequestID = "print('after close')", "req-"+executortest.Nonce()
	s.Language = executors.LangPython
	if res := mustExecute(t, e, s); res.Stdout != "after close\n" {
		t.Errorf("run after Close: %+v", res)
	}
	time.Sleep(100 * time.Millisecond)
	if left := processesInDir(s.WorkspaceDir); len(left) > 0 || e.WarmStats().Idle != 0 {
		t.Errorf("a warm interpreter was started after Close: %v %+v", left, e.WarmStats())
	}
}

// TestWarmReleaseDuringRun: a session released while one of its runs is
// in progress gets no successor interpreter when that run ends.
func TestWarmReleaseDuringRun(t *testing.T) {
	e := newWarmExecutor(t)
	spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), executors.LangBash, "sleep 0.5\necho done\n")
	done := make(chan executors.Result)
	go func() {
		res, _ := e.Execute(context.Background(), spec)
		done <- res
	}()
	// Release once the run is under way (its processes are in the
	// workspace), not after a fixed wait a loaded machine may outlast.
	for deadline := time.Now().Add(10 * time.Second); len(processesInDir(spec.WorkspaceDir)) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the run did not start")
		}
	}
	if err := e.ReleaseSession(t.Context(), spec.SessionID); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Stdout != "done\n" {
		t.Errorf("the run in progress was disturbed: %+v", res)
	}
	time.Sleep(300 * time.Millisecond)
	if left := processesInDir(spec.WorkspaceDir); len(left) > 0 {
		t.Errorf("processes %v in the released session's workspace", left)
	}
	if st := e.WarmStats(); st.Idle != 0 {
		t.Errorf("stats %+v, want no warm interpreter", st)
	}
}

// TestWarmIdleTTLAndEviction: an unused warm interpreter dies after the
// idle TTL; a full pool evicts the oldest.
func TestWarmIdleTTLAndEviction(t *testing.T) {
	t.Run("ttl", func(t *testing.T) {
		e := newWarmExecutor(t, func(c *Config) { c.WarmIdleTTL = 300 * time.Millisecond })
		spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), executors.LangPython, "")
		if err := e.Prewarm(t.Context(), spec); err != nil {
			t.Fatal(err)
		}
		waitWarm(t, e, spec.SessionID, false)
		deadline := time.Now().Add(5 * time.Second)
		for len(processesInDir(spec.WorkspaceDir)) > 0 || e.WarmStats().Expired != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("still there after the TTL: %v %+v", processesInDir(spec.WorkspaceDir), e.WarmStats())
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("evict", func(t *testing.T) {
		e := newWarmExecutor(t, func(c *Config) { c.WarmMax = 2 })
		var specs []executors.Spec
		for range 3 {
			spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), executors.LangPython, "")
			if err := e.Prewarm(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			specs = append(specs, spec)
		}
		st := e.WarmStats()
		if st.Idle != 2 || st.Evicted != 1 {
			t.Fatalf("stats %+v, want 2 idle and 1 evicted", st)
		}
		for _, s := range specs[1:] {
			waitWarm(t, e, s.SessionID, false)
		}
		// The eviction's kill is asynchronous.
		for deadline := time.Now().Add(5 * time.Second); len(processesInDir(specs[0].WorkspaceDir)) > 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the evicted interpreter is still alive: %v", processesInDir(specs[0].WorkspaceDir))
			}
		}
	})
}

// TestWarmDeadInterpreterGoesCold: a warm interpreter killed from outside
// while it waits is not used: the run goes cold and succeeds.
func TestWarmDeadInterpreterGoesCold(t *testing.T) {
	requireRoot(t)
	e := newWarmExecutor(t)
	for _, lang := range []string{executors.LangPython, executors.LangJavaScript} {
		t.Run(lang, func(t *testing.T) {
			code := map[string]string{executors.LangPython: "print('cold ok')", executors.LangJavaScript: "console.log('cold ok')"}[lang]
			spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), lang, code)
			if err := e.Prewarm(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			waitWarm(t, e, spec.SessionID, true)
			for _, pid := range processesInDir(spec.WorkspaceDir) {
				if status, _ := os.ReadFile("/proc/" + pid + "/status"); strings.Contains(string(status), "Uid:\t"+strconv.Itoa(warmUID)) {
					n, _ := strconv.Atoi(pid)
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}
			time.Sleep(100 * time.Millisecond)
			before := e.WarmStats()
			res := mustExecute(t, e, spec)
			if res.Stdout != "cold ok\n" || res.ExitCode != 0 {
				t.Errorf("result %+v", res)
			}
			if after := e.WarmStats(); after.Hits != before.Hits || after.Died < 1 {
				t.Errorf("stats %+v → %+v: want no hit and a dead interpreter counted", before, after)
			}
		})
	}
}

// TestWarmDiesAtHandoffGoesCold: a warm interpreter that dies after the
// hand-off but before its bootstrap let go of the program (it is stopped,
// handed the path, then killed) never ran it: the run goes cold and
// succeeds, with nothing of the dead one in its output.
func TestWarmDiesAtHandoffGoesCold(t *testing.T) {
	requireRoot(t)
	e := newWarmExecutor(t)
	spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), executors.LangPython, "print('ran once')")
	if err := e.Prewarm(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitWarm(t, e, spec.SessionID, true)
	interp := 0
	for _, pid := range processesInDir(spec.WorkspaceDir) {
		if status, _ := os.ReadFile("/proc/" + pid + "/status"); strings.Contains(string(status), "Uid:\t"+strconv.Itoa(warmUID)) {
			interp, _ = strconv.Atoi(pid)
		}
	}
	if interp == 0 {
		t.Fatal("warm interpreter not found")
	}
	if err := syscall.Kill(interp, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	before := e.WarmStats()
	go func() {
		time.Sleep(300 * time.Millisecond) // Execute has handed off by now
		_ = syscall.Kill(interp, syscall.SIGKILL)
	}()
	res := mustExecute(t, e, spec)
	after := e.WarmStats()
	if res.Stdout != "ran once\n" || res.Stderr != "" || res.ExitCode != 0 {
		t.Errorf("result %+v", res)
	}
	if after.Hits != before.Hits || after.Died != before.Died+1 || after.Misses != before.Misses+1 {
		t.Errorf("stats %+v → %+v: want a miss and a dead interpreter, no hit", before, after)
	}
}

// TestWarmTimeoutKillsTree: a warm run's timeout counts from the
// hand-off and kills its whole tree, setsid'd and double-forked
// processes included, exactly as a cold run's.
func TestWarmTimeoutKillsTree(t *testing.T) {
	requireRoot(t)
	e := newWarmExecutor(t)
	for _, lang := range []string{executors.LangPython, executors.LangBash, executors.LangJavaScript} {
		t.Run(lang, func(t *testing.T) {
			m := executortest.NewMarkers(3)
			spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), lang, executortest.TreeProgram(t, lang, m))
			spec.Timeout = 2 * time.Second
			if err := e.Prewarm(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			waitWarm(t, e, spec.SessionID, true)
			hits := e.WarmStats().Hits
			var res executors.Result
			seen := executortest.WatchMarkers(m, func() { res = mustExecute(t, e, spec) })
			if e.WarmStats().Hits != hits+1 {
				t.Fatalf("not served warm: %+v", e.WarmStats())
			}
			if !res.TimedOut || res.ExitCode != executors.ExitCodeTimeout || res.Stdout != "spawned\n" {
				t.Errorf("result %+v, want a timeout after the output", res)
			}
			// The upper bound leaves the kill and the drain room on a
			// loaded machine; a timeout counted from the start of the
			// warm interpreter, not the hand-off, is caught by the lower.
			if res.Duration < 2*time.Second || res.Duration > 10*time.Second {
				t.Errorf("duration %v, want the 2s timeout counted from the hand-off", res.Duration)
			}
			checkTreeGone(t, m, seen)
		})
	}
}

// TestWarmCancelKillsTree: cancelling a warm run's ctx kills its tree and
// Execute returns promptly with the ctx's error.
func TestWarmCancelKillsTree(t *testing.T) {
	requireRoot(t)
	e := newWarmExecutor(t)
	mk := executortest.NewMarkers(1)[0]
	spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), executors.LangPython,
		fmt.Sprintf("import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '%s'])\ntime.sleep(1000)\n", mk))
	if err := e.Prewarm(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitWarm(t, e, spec.SessionID, true)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for len(executortest.ProcessesMatching(mk)) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}()
	began := time.Now()
	_, err := e.Execute(ctx, spec)
	if err == nil || ctx.Err() == nil {
		t.Errorf("Execute: %v, want the cancellation", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("Execute took %v", d)
	}
	checkTreeGone(t, []string{mk}, nil)
}

// checkTreeGone fails t unless every marked process is gone within 3 s
// and, when seen is given, was seen alive before.
func checkTreeGone(t *testing.T, markers []string, seen map[string]bool) {
	t.Helper()
	for _, mk := range markers {
		if seen != nil && !seen[mk] {
			t.Errorf("process %s never seen: the test proves nothing", mk)
		}
	}
	for mk, pids := range executortest.WaitMarkersGone(markers, 3*time.Second) {
		t.Errorf("process %s still alive: %v", mk, pids)
	}
}

// TestWarmForkBombContained: a fork bomb in a warm run ends at its
// timeout with nothing of it left, while the gateway keeps answering, as
// TestForkBombContained requires of a cold one. The session has its own
// uid, so whatever the bomb left would show up under it.
func TestWarmForkBombContained(t *testing.T) {
	requireRoot(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	e := newWarmExecutor(t)
	for i, b := range []struct{ lang, code string }{
		{executors.LangBash, ":(){ :|:& };:\nsleep 10\n"},
		{executors.LangPython, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"},
	} {
		t.Run(b.lang, func(t *testing.T) {
			uid := warmUID + 300 + i
			spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), b.lang, b.code)
			spec.UID, spec.GID, spec.Timeout = uid, uid, 4*time.Second
			if err := e.Prewarm(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			waitWarm(t, e, spec.SessionID, true)
			stop := make(chan struct{})
			worst := make(chan time.Duration, 1)
			go func() { worst <- pollHTTP(srv.URL, stop) }()
			hits := e.WarmStats().Hits
			res := mustExecute(t, e, spec)
			close(stop)
			if e.WarmStats().Hits != hits+1 {
				t.Fatalf("not served warm: %+v", e.WarmStats())
			}
			d := <-worst
			t.Logf("slowest HTTP answer during the bomb: %v", d)
			if d > 2*time.Second {
				t.Errorf("the test's HTTP handler took %v to answer during the bomb", d)
			}
			if res.Duration > 6*time.Second {
				t.Errorf("the bomb ran %v, past its 4s timeout", res.Duration)
			}
			// The run's end starts the session's next interpreter (as this
			// uid): release it, which waits for it, before counting.
			if err := e.ReleaseSession(t.Context(), spec.SessionID); err != nil {
				t.Fatal(err)
			}
			if left := waitUIDGone(strconv.Itoa(uid), 3*time.Second); len(left) > 0 {
				t.Errorf("%d processes of the session's uid left after the bomb", len(left))
			}
		})
	}
}

// TestWarmConcurrentSessions: 16 sessions run at once, each three times;
// every result is its own, the runs after the first are served warm when
// the pool has room, and a pool smaller than the load evicts and still
// gives correct results.
func TestWarmConcurrentSessions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int
		allWarm bool
	}{{"room for all", 16, true}, {"evicting", 4, false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newWarmExecutor(t, func(c *Config) { c.WarmMax = tc.max })
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					lang := []string{executors.LangPython, executors.LangBash}[i%2]
					sess, ws := fmt.Sprintf("sess-%d-%s", i, executortest.Nonce()), executortest.NewWorkspace(t)
					for run := range 3 {
						want := fmt.Sprintf("s%d-r%d", i, run)
						code := map[string]string{executors.LangPython: "print('" + want + "')", executors.LangBash: "echo " + want}[lang]
						res, err := e.Execute(t.Context(), warmRun(sess, ws, lang, code))
						if err != nil || res.Stdout != want+"\n" || res.ExitCode != 0 {
							t.Errorf("session %d run %d: %+v %v", i, run, res, err)
						}
						if tc.allWarm && run < 2 {
							waitWarm(t, e, sess, false)
						}
					}
				})
			}
			wg.Wait()
			st := e.WarmStats()
			t.Logf("stats %+v", st)
			if tc.allWarm && st.Hits != 32 {
				t.Errorf("%d hits, want 32 (every run after a session's first)", st.Hits)
			}
			if st.Hits+st.Misses != 48 {
				t.Errorf("hits+misses = %d, want 48", st.Hits+st.Misses)
			}
			if st.Idle > tc.max {
				t.Errorf("%d idle warm interpreters, more than WarmMax %d", st.Idle, tc.max)
			}
		})
	}
}

// TestWarmIdleCostsNothing: a waiting warm interpreter uses no CPU time,
// so RLIMIT_CPU, counted from its spawn, still bounds the program: it
// only includes the interpreter's start-up, as in a cold run.
func TestWarmIdleCostsNothing(t *testing.T) {
	e := newWarmExecutor(t)
	for _, lang := range []string{executors.LangPython, executors.LangBash, executors.LangJavaScript} {
		t.Run(lang, func(t *testing.T) {
			spec := warmRun("sess-"+executortest.Nonce(), executortest.NewWorkspace(t), lang, "")
			if err := e.Prewarm(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			waitWarm(t, e, spec.SessionID, true)
			time.Sleep(100 * time.Millisecond)
			pids := processesInDir(spec.WorkspaceDir)
			before := cpuTicks(t, pids)
			time.Sleep(time.Second)
			if after := cpuTicks(t, pids); after != before {
				t.Errorf("the waiting processes used %d clock ticks of CPU in 1s", after-before)
			}
		})
	}
}

// cpuTicks sums utime+stime of pids (all their threads).
func cpuTicks(t *testing.T, pids []string) int {
	t.Helper()
	total := 0
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		u, _ := strconv.Atoi(f[11])
		k, _ := strconv.Atoi(f[12])
		total += u + k
	}
	return total
}

// TestWarmDiesWithGateway: a warm interpreter and a zygote die with the
// gateway, like a run (Pdeathsig on the init step).
func TestWarmDiesWithGateway(t *testing.T) {
	requireRoot(t)
	for _, mode := range []string{"warm", "zygote"} {
		t.Run(mode, func(t *testing.T) {
			ws := executortest.NewWorkspace(t)
			helper := exec.Command(os.Args[0], "-test.run=^$")
			helper.Env = append(os.Environ(), helperEnv+"=gateway-warm", "HELPER_WS="+ws, "HELPER_MODE="+mode)
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(15 * time.Second)
			for len(processesInDir(ws)) < 2 {
				if time.Now().After(deadline) {
					helper.Process.Kill()
					helper.Wait()
					t.Fatalf("the helper's %s interpreter never started", mode)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			helper.Wait()
			deadline = time.Now().Add(3 * time.Second)
			for len(processesInDir(ws)) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s processes %v outlived the gateway", mode, processesInDir(ws))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// helperGatewayWarm prewarms one session (a warm interpreter, or with
// HELPER_MODE=zygote a zygote) and waits to be killed.
func helperGatewayWarm() int {
	ctx := context.Background()
	e, err := New(ctx, Config{DisableZygote: os.Getenv("HELPER_MODE") != "zygote"})
	if err == nil && e.Isolation() == IsolationNone {
		return 2
	}
	if err != nil {
		return 2
	}
	if err := e.Prewarm(ctx, executors.Spec{SessionID: "helper", Language: executors.LangPython,
		WorkspaceDir: os.Getenv("HELPER_WS")}); err != nil {
		return 3
	}
	time.Sleep(time.Hour)
	return 0
}
