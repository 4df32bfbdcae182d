package executortest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

func (s *suite) testStdoutStderr(t *testing.T, lang string) {
	r := s.newRun(t, lang, progStdoutStderr.get(t, lang))
	res := r.do(t.Context())
	if res.Stdout != "to-stdout\n" || res.Stderr != "to-stderr\n" {
		t.Errorf("stdout %q stderr %q, want %q and %q", res.Stdout, res.Stderr, "to-stdout\n", "to-stderr\n")
	}
	if res.ExitCode != 0 || res.TimedOut || res.Truncated || res.OutputPath != "" {
		t.Errorf("result %+v, want a clean exit", res)
	}
}

func (s *suite) testExitCodes(t *testing.T, lang string) {
	for _, code := range []int{0, 1, 3, 42} {
		t.Run("exit"+strconv.Itoa(code), func(t *testing.T) {
			r := s.newRun(t, lang, progExit.get(t, lang, code))
			res := r.do(t.Context())
			if res.ExitCode != code || res.Stdout != "exiting\n" {
				t.Errorf("exit code %d stdout %q, want %d and %q (stderr %q)", res.ExitCode, res.Stdout, code, "exiting\n", res.Stderr)
			}
		})
	}
}

func (s *suite) testFailureIsResult(t *testing.T, lang string) {
	r := s.newRun(t, lang, progFail.get(t, lang))
	res := r.do(t.Context())
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "boom-failure") {
		t.Errorf("exit code %d stderr %q, want non-zero and the failure message", res.ExitCode, res.Stderr)
	}
}

// testOutputCap: output beyond MaxOutputBytes is cut from the response and
// kept in full in the spill file named by OutputPath.
func (s *suite) testOutputCap(t *testing.T, lang string) {
	const copies, limit = 2000, 1000
	r := s.newRun(t, lang, progRepeat.get(t, lang, copies))
	r.spec.Limits.MaxOutputBytes = limit
	r.spec.Limits.MaxSpillBytes = 1 << 20
	res := r.do(t.Context())
	want := strings.Repeat("0123456789", copies)
	if !res.Truncated || len(res.Stdout) > limit || !strings.HasPrefix(want, res.Stdout) || len(res.Stdout) < limit/2 {
		t.Fatalf("truncated=%v len(stdout)=%d, want a prefix of at most %d bytes", res.Truncated, len(res.Stdout), limit)
	}
	wantPath := "/workspace/.sandgate/outputs/" + r.spec.RequestID + ".log"
	if res.OutputPath != wantPath {
		t.Fatalf("OutputPath %q, want %q", res.OutputPath, wantPath)
	}
	got, err := os.ReadFile(r.hostPath(res.OutputPath))
	if err != nil {
		t.Fatalf("spill file: %v", err)
	}
	if string(got) != want {
		t.Errorf("spill file has %d bytes, want the full %d-byte output", len(got), len(want))
	}
}

// testOutputFlood: a child writing 50 MiB as fast as it can neither blocks
// nor makes the gateway buffer it all.
func (s *suite) testOutputFlood(t *testing.T, lang string) {
	const mib, limit, spill = 50, 1 << 20, 4 << 20
	r := s.newRun(t, lang, progFlood.get(t, lang, mib))
	r.spec.Limits.MaxOutputBytes = limit
	r.spec.Limits.MaxSpillBytes = spill
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := r.do(t.Context())
	runtime.ReadMemStats(&after)
	if res.TimedOut || res.ExitCode != 0 {
		t.Fatalf("exit %d timed out %v (stderr %q)", res.ExitCode, res.TimedOut, res.Stderr)
	}
	if !res.Truncated || len(res.Stdout) != limit {
		t.Errorf("truncated=%v len(stdout)=%d, want %d", res.Truncated, len(res.Stdout), limit)
	}
	if fi, err := os.Stat(r.hostPath(res.OutputPath)); err != nil || fi.Size() != spill {
		t.Errorf("spill file: %v, want exactly %d bytes", err, spill)
	}
	// Allocations cover the two response buffers and the spill journal,
	// not the 50 MiB stream.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40<<20 {
		t.Errorf("Execute allocated %d MiB for a 50 MiB stream", alloc>>20)
	}
}

// testTimeoutKillsTree: at the timeout the result is 124/TimedOut and
// every process of the run is gone, including setsid'd and double-forked
// ones. A run whose program had not even printed "spawned" when its 3 s
// ran out (a fresh container's interpreter on a loaded 2-core machine),
// or whose tree the watch's /proc scans had not all seen by then (CI:
// aio, javascript), proves nothing about the kill, so it is run again,
// once, with a timeout long enough to start in.
func (s *suite) testTimeoutKillsTree(t *testing.T, lang string) {
	var (
		m    []string
		res  executors.Result
		seen map[string]bool
	)
	for _, timeout := range []time.Duration{3 * time.Second, 15 * time.Second} {
		m = NewMarkers(3)
		r := s.newRun(t, lang, progTree.get(t, lang, m[0], m[1], m[2]))
		r.spec.Timeout = timeout
		w := watchMarkers(m)
		res = r.do(t.Context())
		seen = w.stop()
		if !res.TimedOut || (strings.Contains(res.Stdout, "spawned") && s.sawAll(m, seen)) {
			break
		}
		t.Logf("the program had not started its tree, or the watch had not seen it, within %s; again with a longer timeout", timeout)
		s.checkStartedGone(t, m)
	}
	if !res.TimedOut || res.ExitCode != executors.ExitCodeTimeout {
		t.Errorf("timed out %v exit %d, want true and 124 (stderr %q)", res.TimedOut, res.ExitCode, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "spawned") {
		t.Errorf("stdout %q: output written before the kill is lost", res.Stdout)
	}
	s.checkTreeGone(t, m, seen)
}

// testCancelKillsTree: cancelling ctx (the client went away) kills the
// tree like a timeout and Execute returns promptly, long before the
// run's timeout.
func (s *suite) testCancelKillsTree(t *testing.T, lang string) {
	m := NewMarkers(3)
	r := s.newRun(t, lang, progTree.get(t, lang, m[0], m[1], m[2]))
	r.spec.Timeout = time.Minute
	w := watchMarkers(m)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cancelledAt := make(chan time.Time, 1)
	go func() {
		if !s.h.ProcessesVisible || !w.waitAll(15*time.Second) {
			time.Sleep(2 * time.Second)
		}
		cancelledAt <- time.Now()
		cancel()
	}()
	_, err := r.exec.Execute(ctx, r.spec)
	returned := time.Now()
	seen := w.stop()
	cancelled := <-cancelledAt
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Execute after cancel: %v, want nil or context.Canceled", err)
	}
	// Well within the run's own minute: the cancel, not the timeout,
	// ended it. Ending a container run takes API calls (the kill, the
	// stream's drain, maybe the kill grace), slow on a loaded engine.
	if d := returned.Sub(cancelled); d > 15*time.Second {
		t.Errorf("Execute returned %v after cancel, want at most 15s (the run's timeout is %v)", d, r.spec.Timeout)
	}
	s.checkTreeGone(t, m, seen)
}

// checkTreeGone fails when a marked process is still alive after a short
// grace, or (when processes are visible) was never seen at all. m[0] is
// the in-group child; the others left the process group.
// checkStartedGone: whatever of m the run started is gone once it has
// ended (the setsid'd ones only where the executor kills them).
func (s *suite) checkStartedGone(t *testing.T, m []string) {
	t.Helper()
	must := m
	if s.h.DetachedEscape != "" {
		must = m[:1]
		defer killMarked(m[1:])
	}
	if left := WaitMarkersGone(must, 3*time.Second); len(left) > 0 {
		t.Errorf("processes still alive after the run: %v", left)
	}
}

// sawAll reports whether the watch saw every marker's process, where the
// harness can see the sandbox's processes at all.
func (s *suite) sawAll(m []string, seen map[string]bool) bool {
	if !s.h.ProcessesVisible {
		return true
	}
	for _, marker := range m {
		if !seen[marker] {
			return false
		}
	}
	return true
}

func (s *suite) checkTreeGone(t *testing.T, m []string, seen map[string]bool) {
	t.Helper()
	if s.h.ProcessesVisible {
		for _, marker := range m {
			if !seen[marker] {
				t.Errorf("process %q was never seen running: the test proves nothing", marker)
			}
		}
	}
	if s.h.DetachedEscape != "" {
		t.Logf("not requiring setsid'd processes to die: %s", s.h.DetachedEscape)
	}
	s.checkStartedGone(t, m)
}

func (s *suite) testEnvironment(t *testing.T, lang string) {
	canary := "canary-" + Nonce()
	t.Setenv("SANDGATE_CONFORMANCE_CANARY", canary)
	r := s.newRun(t, lang, progEnv.get(t, lang))
	res := r.do(t.Context())
	if strings.Contains(res.Stdout, canary) || strings.Contains(res.Stdout, "SANDGATE_CONFORMANCE_CANARY") {
		t.Errorf("the code sees the gateway's environment:\n%s", res.Stdout)
	}
	for _, name := range []string{"PATH", "HOME", "LANG"} {
		if !hasLinePrefix(res.Stdout, name+"=") {
			t.Errorf("%s missing from the environment:\n%s", name, res.Stdout)
		}
	}
}

func (s *suite) testWorkingDirectory(t *testing.T, lang string) {
	r := s.newRun(t, lang, progCwd.get(t, lang))
	if err := os.WriteFile(filepath.Join(r.ws, "in.txt"), []byte("hello-in"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := r.do(t.Context())
	if res.ExitCode != 0 {
		t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	got, err := os.ReadFile(filepath.Join(r.ws, "out.txt"))
	if err != nil || string(got) != "HELLO-IN" {
		t.Errorf("out.txt = %q, %v; want %q", got, err, "HELLO-IN")
	}
}

func (s *suite) testHostPathMasked(t *testing.T, lang string) {
	r := s.newRun(t, lang, progPaths.get(t, lang))
	res := r.do(t.Context())
	all := res.Stdout + res.Stderr
	for _, p := range hostSpellings(r.ws) {
		if p != "/workspace" && strings.Contains(all, p) {
			t.Errorf("output shows the host path %q:\n%s", p, all)
		}
	}
	if !strings.HasPrefix(res.Stdout, "/workspace\n") || !strings.Contains(all, "/workspace/missing.txt") {
		t.Errorf("output does not show /workspace paths:\n%s", all)
	}
}

func (s *suite) testBinaryAndUnicode(t *testing.T, lang string) {
	r := s.newRun(t, lang, progBinary.get(t, lang, unicodeLine))
	res := r.do(t.Context())
	if res.Stdout != unicodeLine+"\n" {
		t.Errorf("stdout %q, want %q", res.Stdout, unicodeLine+"\n")
	}
	if res.Stderr != allBytes() {
		t.Errorf("stderr %q, want the bytes 0..255", res.Stderr)
	}
}

// hostSpellings returns the ways a host path may be printed.
func hostSpellings(dir string) []string {
	out := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		out = append(out, real)
	}
	return out
}

func hasLinePrefix(text, prefix string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}
