package mcp

import (
	"strings"
	"testing"
	"time"
)

// TestOutputAsProgress: a long run_code reports its output as progress
// notifications while it runs, with increasing values; the result still
// holds the whole output. The program waits after line 1 (at most 20 s,
// then it says "gate timeout") for a file the client writes only once
// line 1 has come as progress: a run that ends without saying so
// reported line 1 while it ran, however slow the machine.
func TestOutputAsProgress(t *testing.T) {
	e := newEnv(t, envOpts{})
	probe := &clientProbe{}
	cs := e.connect(agentTok, probe.options(false))
	code := "import os, time\nprint('line', 1, flush=True)\ndeadline = time.monotonic() + 20\n" +
		"while not os.path.exists('stream-gate') and time.monotonic() < deadline:\n    time.sleep(0.05)\n" +
		"if not os.path.exists('stream-gate'):\n    print('gate timeout', flush=True)\n" +
		"for i in range(2, 6):\n    time.sleep(0.4)\n    print('line', i, flush=True)\n"
	began := time.Now()
	ch := callAsync(t, cs, "run_code", map[string]any{"code": code, "timeout_s": 60})
	var firstAt time.Duration
	for firstAt == 0 && time.Since(began) < 30*time.Second {
		prog, _, _ := probe.snapshot()
		for _, p := range prog {
			if strings.Contains(p.Message, "line 1") {
				firstAt = time.Since(began)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if firstAt == 0 {
		t.Fatal("line 1 never came as progress")
	}
	// The same MCP session, so the same workspace as the run's.
	if w := callTool(t, cs, "write_file", map[string]any{"path": "stream-gate", "content": "", "mode": "create"}); w.IsError {
		t.Fatalf("write_file (the gate): %s", text(w))
	}
	res := await(t, ch)
	t.Logf("line 1 came as progress %v before the result", time.Since(began)-firstAt)
	var out runOutput
	structured(t, res, &out)
	if strings.Contains(out.Stdout, "gate timeout") {
		t.Fatalf("the program waited 20s for line 1 to come as progress and gave up: %q", out.Stdout)
	}
	if out.Stdout != "line 1\nline 2\nline 3\nline 4\nline 5\n" {
		t.Fatalf("result stdout %q", out.Stdout)
	}
	prog, _, _ := probe.snapshot()
	for i := 1; i < len(prog); i++ {
		if prog[i].Progress <= prog[i-1].Progress {
			t.Fatalf("progress not increasing: %+v after %+v", prog[i], prog[i-1])
		}
	}
}
