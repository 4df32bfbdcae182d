package executortest

import (
	"crypto/rand"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// The memory and process obligations (DESIGN.md §6: enforced per run in
// every executor). Each case has a control run under the same limit that
// must succeed, so a run that fails for another reason (an interpreter
// that cannot start under the limit) does not pass for the wrong one.

// limitMemoryMB is the memory obligation of the memory cases.
const limitMemoryMB = 64

// progAlloc allocates %[1]d MiB and touches every page (a cgroup limit
// counts resident memory, not reservations), then prints "allocated N".
var progAlloc = program{
	"python":     "b = b'x' * (%[1]d << 20)\nprint('allocated', %[1]d)\n",
	"bash":       "head -c %[1]dM /dev/zero | tail -c %[1]dM > /dev/null && echo allocated %[1]d\n",
	"javascript": "const a = [];\nfor (let i = 0; i < %[1]d; i++) a.push(new Array(131072).fill(i + 0.5));\nconsole.log('allocated', %[1]d);\n",
}

// progFork starts %[1]d children that sleep, counts the ones it could
// start, kills them and prints "started N".
var progFork = program{
	"python": `import os, signal, time
pids = []
try:
    for _ in range(%[1]d):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        pids.append(pid)
except OSError as e:
    print('fork failed:', e)
for p in pids:
    os.kill(p, signal.SIGKILL)
    os.waitpid(p, 0)
print('started', len(pids))
`,
	// bash retries a failed fork for about 15 s ("fork: retry: Resource
	// temporarily unavailable") before it gives up on the script, so a
	// bash run over the limit ends at its timeout.
	"bash": `n=0
for ((i = 0; i < %[1]d; i++)); do
  sleep 30 &
  n=$((n + 1))
done
echo "started $n"
kill $(jobs -p) 2>/dev/null
wait
`,
	"javascript": `const cp = require('child_process');
const kids = [];
for (let i = 0; i < %[1]d; i++) {
  const c = cp.spawn('sleep', ['30'], { stdio: 'ignore' });
  c.on('error', () => {});
  if (c.pid !== undefined) kids.push(c);
}
for (const c of kids) c.kill('SIGKILL');
console.log('started', kids.length);
`,
}

// procLimit is the process obligation per language: Node needs about a
// dozen threads of its own to start, and threads count.
var procLimit = map[string]int{"python": 8, "bash": 8, "javascript": 24}

// limitedRun is a run with the given limits under a uid of its own:
// RLIMIT_NPROC counts per uid, so a budget shared with whatever else runs
// as the executor's default uid on this host (another test binary) would
// make the control fail for a reason that is not the executor's.
func (s *suite) limitedRun(t *testing.T, lang, code string, lim executors.Limits) *run {
	t.Helper()
	r := s.newRun(t, lang, code)
	r.spec.Limits = lim
	id := isolatedID()
	r.spec.UID, r.spec.GID = id, id
	return r
}

// isolatedID is a uid/gid in a range no workspace allocates
// (workspace.DefaultUIDBase is 2,000,000) and no account uses.
func isolatedID() int {
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		panic(err)
	}
	return 5_000_000 + int(n.Int64())
}

// testMemoryLimit: a run with memory_mb=64 that allocates 200 MB fails;
// one that allocates 8 MB under the same limit succeeds.
func (s *suite) testMemoryLimit(t *testing.T, lang string) {
	if c := s.h.New(t).Capabilities(); !c.MemoryLimit {
		t.Skipf("the executor does not claim memory_limit (%s): the policy never sends it such a run", c.Isolation)
	}
	lim := executors.Limits{MemoryMB: limitMemoryMB}
	ok := s.limitedRun(t, lang, progAlloc.get(t, lang, 8), lim).do(t.Context())
	if ok.ExitCode != 0 || !strings.Contains(ok.Stdout, "allocated 8") {
		t.Fatalf("control: 8 MB under %d MB: exit %d stdout %q stderr %q", limitMemoryMB, ok.ExitCode, ok.Stdout, ok.Stderr)
	}
	res := s.limitedRun(t, lang, progAlloc.get(t, lang, 200), lim).do(t.Context())
	if res.ExitCode == 0 || strings.Contains(res.Stdout, "allocated 200") {
		t.Fatalf("200 MB under %d MB: exit %d stdout %q stderr %q: the memory obligation does not hold",
			limitMemoryMB, res.ExitCode, res.Stdout, truncate(res.Stderr, 500))
	}
	t.Logf("200 MB under %d MB: exit %d oom_killed %v stderr %q", limitMemoryMB, res.ExitCode, res.OOMKilled, truncate(res.Stderr, 200))
}

// testProcessLimit: a run with max_procs=8 (24 for node) that forks 50
// children cannot start them all; one that forks 2 can.
func (s *suite) testProcessLimit(t *testing.T, lang string) {
	if c := s.h.New(t).Capabilities(); !c.ProcessLimit {
		t.Skipf("the executor does not claim process_limit (%s): the policy never sends it such a run", c.Isolation)
	}
	lim := executors.Limits{MaxProcs: procLimit[lang]}
	ok := s.limitedRun(t, lang, progFork.get(t, lang, 2), lim).do(t.Context())
	if ok.ExitCode != 0 || !strings.Contains(ok.Stdout, "started 2\n") {
		t.Fatalf("control: 2 children under max_procs=%d: exit %d stdout %q stderr %q", lim.MaxProcs, ok.ExitCode, ok.Stdout, ok.Stderr)
	}
	r := s.limitedRun(t, lang, progFork.get(t, lang, 50), lim)
	// Long enough for node to start a few children on a loaded machine
	// (CI trial: node printed nothing within 6 s at load 20); a run the
	// limit stops ends long before it.
	r.spec.Timeout = 20 * time.Second
	res := r.do(t.Context())
	if strings.Contains(res.Stdout, "started 50\n") {
		t.Fatalf("50 children under max_procs=%d all started: stdout %q: the process obligation does not hold", lim.MaxProcs, res.Stdout)
	}
	// The run must show the limit at work, not merely have ended early
	// (a slow start cut by the timeout would prove nothing).
	if !startedFewer(res.Stdout, 50) && !strings.Contains(res.Stdout+res.Stderr, "Resource temporarily unavailable") {
		t.Fatalf("50 children under max_procs=%d: no sign of a refused fork: exit %d stdout %q stderr %q",
			lim.MaxProcs, res.ExitCode, res.Stdout, truncate(res.Stderr, 500))
	}
	t.Logf("50 children under max_procs=%d: exit %d timed out %v stdout %q", lim.MaxProcs, res.ExitCode, res.TimedOut, truncate(res.Stdout, 200))
}

// startedFewer reports a "started N" line with N < want.
func startedFewer(stdout string, want int) bool {
	for line := range strings.Lines(stdout) {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "started "); ok {
			if v, err := strconv.Atoi(n); err == nil && v < want {
				return true
			}
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
