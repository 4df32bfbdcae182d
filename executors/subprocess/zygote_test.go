package subprocess

import (
	"os"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// zygoteUID is the sandbox uid of the zygote tests' executors, a range of
// their own (65000–65399) for the same reasons as warmUID.
var zygoteUID = 65000 + os.Getpid()%200

// newZygoteExecutor is an executor whose Python session runs use zygotes.
// It skips without root: zygotes need namespace isolation.
func newZygoteExecutor(t *testing.T, mutate ...func(*Config)) *Executor {
	t.Helper()
	requireRoot(t)
	e := newTestExecutor(t, append([]func(*Config){func(c *Config) {
		c.SandboxUID, c.SandboxGID = zygoteUID, zygoteUID
	}}, mutate...)...)
	if e.zygotes == nil {
		t.Fatalf("zygotes are off (isolation %s)", e.isolation)
	}
	return e
}

// zygoteOf returns session's zygote, or nil.
func zygoteOf(e *Executor, session string) *zygote {
	e.zygotes.mu.Lock()
	defer e.zygotes.mu.Unlock()
	return e.zygotes.live[session]
}

// TestZygoteServesSessionRuns: every Python run of a session, the first
// included, runs in the session's one zygote, with the right output and
// exit status each time; a run without a session runs cold.
func TestZygoteServesSessionRuns(t *testing.T) {
	e := newZygoteExecutor(t)
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	var first *zygote
	for i, tc := range []struct {
		code, stdout, stderr string
		exit                 int
	}{
		{"print(1)", "1\n", "", 0},
		{"import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(7)", "out\n", "err\n", 7},
		{"import os\nos.kill(os.getpid(), 9)", "", "Killed\n", 137},
		{"raise SystemExit('bye')", "", "bye\n", 1},
	} {
		before := e.WarmStats()
		res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, tc.code))
		if res.Stdout != tc.stdout || res.Stderr != tc.stderr || res.ExitCode != tc.exit || res.TimedOut {
			t.Errorf("run %d: got %+v, want stdout %q stderr %q exit %d", i, res, tc.stdout, tc.stderr, tc.exit)
		}
		if got := e.WarmStats(); got.Hits != before.Hits+1 {
			t.Errorf("run %d not served by the zygote: %+v", i, got)
		}
		z := zygoteOf(e, sess)
		if first == nil {
			first = z
		}
		if z == nil || z != first {
			t.Errorf("run %d: session zygote %p, want the first one %p", i, z, first)
		}
	}
	if st := e.WarmStats(); st.Spawned != 1 || st.Zygotes != 1 {
		t.Errorf("stats %+v, want one zygote", st)
	}
	before := e.WarmStats()
	if res, _ := execute(t, e, executors.LangPython, "print(2)"); res.Stdout != "2\n" {
		t.Errorf("sessionless run: %+v", res)
	}
	if got := e.WarmStats(); got.Hits != before.Hits || got.Misses != before.Misses {
		t.Errorf("a run without a session touched the zygotes: %+v", got)
	}
}

// TestZygoteMatchesCold runs each Python fidelity program cold and in a
// zygote (same request id, twin workspaces) and requires the same result:
// the interpreter state, /proc, limits, ids, environment, descriptors,
// tracebacks and exit paths.
func TestZygoteMatchesCold(t *testing.T) {
	cold := newTestExecutor(t, func(c *Config) {
		c.SandboxUID, c.SandboxGID, c.DisableWarm = zygoteUID+1, zygoteUID+1, true
	})
	zy := newZygoteExecutor(t, func(c *Config) { c.SandboxUID, c.SandboxGID = zygoteUID+1, zygoteUID+1 })
	for _, tc := range fidelityCases {
		if tc.lang != executors.LangPython {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			id := "req-" + executortest.Nonce()
			results := make([]executors.Result, 2)
			for i, e := range []*Executor{cold, zy} {
				ws := executortest.NewWorkspace(t)
				spec := warmRun("sess-"+executortest.Nonce(), ws, tc.lang, tc.code)
				spec.RequestID = id
				if e == zy {
					// A second run, so the compared one is not the session's first.
					mustExecute(t, e, warmRun(spec.SessionID, ws, tc.lang, "pass"))
				}
				hits := e.WarmStats().Hits
				results[i] = mustExecute(t, e, spec)
				if e == zy && e.WarmStats().Hits != hits+1 {
					t.Fatalf("the run was not served by a zygote: %+v", e.WarmStats())
				}
			}
			c, z := results[0], results[1]
			c.Duration, z.Duration = 0, 0
			if c != z {
				t.Errorf("cold and zygote differ\ncold exit %d stdout:\n%s\nstderr:\n%s\nzygote exit %d stdout:\n%s\nstderr:\n%s",
					c.ExitCode, c.Stdout, c.Stderr, z.ExitCode, z.Stdout, z.Stderr)
			}
		})
	}
}

var _ = time.Second
