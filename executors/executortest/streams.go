package executortest

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors/output"
)

// streamRecorder is a Spec.Output that keeps what it is given, with the
// time it came.
type streamRecorder struct {
	mu     sync.Mutex
	chunks []recordedChunk
}

type recordedChunk struct {
	output.Chunk
	at time.Time
}

func (r *streamRecorder) tap(c output.Chunk) {
	c.Data = append([]byte(nil), c.Data...) // valid only during the call
	r.mu.Lock()
	r.chunks = append(r.chunks, recordedChunk{c, time.Now()})
	r.mu.Unlock()
}

// check fails t unless the chunks are numbered 1, 2, … and each stream's
// chunks add up to what the Result reports.
func (r *streamRecorder) check(t *testing.T, stdout, stderr string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var got [2]strings.Builder
	for i, c := range r.chunks {
		if c.Seq != uint64(i+1) {
			t.Fatalf("chunk %d has seq %d, want %d", i, c.Seq, i+1)
		}
		got[c.Stream].Write(c.Data)
	}
	if got[output.Stdout].String() != stdout || got[output.Stderr].String() != stderr {
		t.Errorf("streamed stdout %q stderr %q; the result has %q and %q",
			got[output.Stdout].String(), got[output.Stderr].String(), stdout, stderr)
	}
}

// firstAt returns when the first chunk starting with prefix came.
func (r *streamRecorder) firstAt(prefix string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.chunks {
		if strings.HasPrefix(string(c.Data), prefix) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// progLinesGated prints "line 1", then waits until the file %[1]s (in its
// working directory, the workspace) exists, at most %[2]d s, then prints
// "line 2" on stderr and "line 3" on stdout. The test creates the file
// only once it has received line 1, so a run that ends with "line 2"
// streamed line 1 while it was still running, however slow delivery is;
// one that gave up waiting says "gate timeout" instead of "line 2".
var progLinesGated = program{
	"python": `import os, sys, time
print('line 1', flush=True)
deadline = time.monotonic() + %[2]d
while not os.path.exists(%[1]q) and time.monotonic() < deadline:
    time.sleep(0.05)
print('line 2' if os.path.exists(%[1]q) else 'gate timeout', file=sys.stderr, flush=True)
print('line 3', flush=True)
`,
	"bash": `echo 'line 1'
while [ ! -e %[1]q ] && (( SECONDS < %[2]d )); do sleep 0.05; done
if [ -e %[1]q ]; then echo 'line 2' >&2; else echo 'gate timeout' >&2; fi
echo 'line 3'
`,
	"javascript": `const fs = require('fs');
console.log('line 1');
const deadline = Date.now() + %[2]d * 1000;
const timer = setInterval(() => {
  const open = fs.existsSync(%[1]q);
  if (!open && Date.now() < deadline) return;
  clearInterval(timer);
  console.error(open ? 'line 2' : 'gate timeout');
  console.log('line 3');
}, 50);
`,
}

// streamGateWait bounds how long progLinesGated waits for the test: only
// a stream that does not deliver line 1 while the program runs needs
// more than a moment of it.
const streamGateWait = 20 * time.Second

// testStreamWhileRunning: Spec.Output receives the first line while the
// program still runs (it waits for the test to have received it before
// it prints the rest and exits), and the chunks are the Result's output.
func (s *suite) testStreamWhileRunning(t *testing.T, lang string) {
	if s.h.CopiedWorkspace != "" {
		t.Skipf("the gate is a host file written mid-run: %s", s.h.CopiedWorkspace)
	}
	gate := "stream-gate-" + Nonce()
	r := s.newRun(t, lang, progLinesGated.get(t, lang, gate, int(streamGateWait/time.Second)))
	r.spec.Timeout = s.h.RunTimeout + streamGateWait
	var (
		rec     streamRecorder
		once    sync.Once
		gateErr error
	)
	r.spec.Output = func(c output.Chunk) {
		rec.tap(c)
		if strings.HasPrefix(string(c.Data), "line 1") {
			once.Do(func() { gateErr = os.WriteFile(filepath.Join(r.ws, gate), nil, 0o644) })
		}
	}
	res := r.do(t.Context())
	once.Do(func() {}) // gateErr, if set, is set before this returns
	if gateErr != nil {
		t.Fatalf("open the gate: %v", gateErr)
	}
	if strings.Contains(res.Stderr, "gate timeout") {
		t.Fatalf("the program waited %v for the test to receive line 1 and gave up: line 1 was not streamed while it ran (result %+v)", streamGateWait, res)
	}
	if res.Stdout != "line 1\nline 3\n" || res.Stderr != "line 2\n" || res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	rec.check(t, res.Stdout, res.Stderr)
	if _, ok := rec.firstAt("line 1"); !ok {
		t.Fatal("line 1 was never streamed")
	}
}

// testStreamIsResult: what Output receives went through the same mask and
// cap as the Result: host paths never show, and a capped stream streams
// the capped bytes only.
func (s *suite) testStreamIsResult(t *testing.T, lang string) {
	t.Run("masked", func(t *testing.T) {
		r := s.newRun(t, lang, progPaths.get(t, lang))
		var rec streamRecorder
		r.spec.Output = rec.tap
		res := r.do(t.Context())
		rec.check(t, res.Stdout, res.Stderr)
		if !strings.Contains(res.Stdout+res.Stderr, "/workspace/missing.txt") {
			t.Errorf("output does not show /workspace paths: %q %q", res.Stdout, res.Stderr)
		}
	})
	t.Run("capped", func(t *testing.T) {
		const copies, limit = 2000, 1000
		r := s.newRun(t, lang, progRepeat.get(t, lang, copies))
		r.spec.Limits.MaxOutputBytes = limit
		r.spec.Limits.MaxSpillBytes = 1 << 20
		var rec streamRecorder
		r.spec.Output = rec.tap
		res := r.do(t.Context())
		if !res.Truncated || len(res.Stdout) != limit {
			t.Fatalf("truncated=%v len(stdout)=%d, want %d", res.Truncated, len(res.Stdout), limit)
		}
		rec.check(t, res.Stdout, res.Stderr)
	})
}
