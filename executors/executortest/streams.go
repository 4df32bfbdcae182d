package executortest

import (
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

// testStreamWhileRunning: Spec.Output receives the first line while the
// program still runs (it sleeps 1.5 s after it), and the chunks are the
// Result's output.
func (s *suite) testStreamWhileRunning(t *testing.T, lang string) {
	r := s.newRun(t, lang, progLines.get(t, lang))
	var rec streamRecorder
	r.spec.Output = rec.tap
	res := r.do(t.Context())
	ended := time.Now()
	if res.Stdout != "line 1\nline 3\n" || res.Stderr != "line 2\n" || res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	rec.check(t, res.Stdout, res.Stderr)
	at, ok := rec.firstAt("line 1")
	if !ok {
		t.Fatal("line 1 was never streamed")
	}
	if early := ended.Sub(at); early < time.Second {
		t.Errorf("line 1 was streamed %v before the run ended, want more than 1s (the program sleeps 1.5s after it)", early)
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
