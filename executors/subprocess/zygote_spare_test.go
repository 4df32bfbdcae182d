package subprocess

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestZygoteSpareIsFreshPerRun: the runs a zygote serves from its spare
// (prepared while the session was idle) see exactly what a run forked on
// demand sees: their own PID namespace holding only their init and
// themselves, an empty private /tmp (a previous run's file is gone), the
// sandbox uid, and the workspace. The spare is there between runs, and
// releasing the session leaves none of its processes behind.
func TestZygoteSpareIsFreshPerRun(t *testing.T) {
	e := newZygoteExecutor(t)
	sess, ws := "sess-"+executortest.Nonce(), executortest.NewWorkspace(t)
	code := "import os\n" +
		"print(os.getpid(), sorted(p for p in os.listdir('/proc') if p.isdigit()), os.listdir('/tmp'), os.getuid(), os.getcwd())\n" +
		"open('/tmp/left', 'w').write('x')\n"
	want := fmt.Sprintf("2 ['1', '2'] [] %d /workspace\n", zygoteUID)
	for i := range 4 {
		hits := e.WarmStats().Hits
		res := mustExecute(t, e, warmRun(sess, ws, executors.LangPython, code))
		if res.Stdout != want || res.ExitCode != 0 || e.WarmStats().Hits != hits+1 {
			t.Fatalf("run %d: %+v (zygote hits %d→%d), want stdout %q", i, res, hits, e.WarmStats().Hits, want)
		}
	}
	z := zygoteOf(e, sess)
	tree := waitDescendants(t, z.proc.cmd.Process.Pid, 5) // the launch chain and the zygote, and the spare's C, P1 and R
	if err := e.ReleaseSession(t.Context(), sess); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for left := alive(tree); len(left) > 0; left = alive(tree) {
		if time.Now().After(deadline) {
			t.Fatalf("after release, processes of the zygote's tree remain: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procID identifies a process across pid reuse: its pid and start time.
type procID struct {
	pid   int
	start string
}

// waitDescendants waits until root has at least n descendants (the spare
// is prepared after the run that used the last one has been answered) and
// returns them.
func waitDescendants(t *testing.T, root, n int) []procID {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := descendants(root)
		if len(d) >= n {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("the zygote's tree has %d processes, want at least %d (the zygote and its spare)", len(d), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// descendants lists every process below root, from /proc.
func descendants(root int) []procID {
	parent := map[int]int{}
	start := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: state, ppid, ...
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 20 {
			continue
		}
		parent[pid], _ = strconv.Atoi(f[1])
		start[pid] = f[19]
	}
	var out []procID
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				out = append(out, procID{pid, start[pid]})
				break
			}
		}
	}
	return out
}

// alive returns the processes of list that still exist.
func alive(list []procID) []procID {
	var out []procID
	for _, p := range list {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) >= 20 && f[19] == p.start && f[0] != "Z" {
			out = append(out, p)
		}
	}
	return out
}
