package mcp

import (
	"strings"
	"testing"
	"time"
)

// TestOutputAsProgress: a long run_code reports its output as progress
// notifications while it runs (line 1 arrives well before the result),
// with increasing values; the result still holds the whole output.
func TestOutputAsProgress(t *testing.T) {
	e := newEnv(t, envOpts{})
	probe := &clientProbe{}
	cs := e.connect(agentTok, probe.options(false))
	code := "import time\nfor i in range(1, 6):\n    print('line', i, flush=True)\n    time.sleep(0.4)\n"
	began := time.Now()
	ch := callAsync(t, cs, "run_code", map[string]any{"code": code})
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
	res := await(t, ch)
	doneAt := time.Since(began)
	var out runOutput
	structured(t, res, &out)
	if out.Stdout != "line 1\nline 2\nline 3\nline 4\nline 5\n" {
		t.Fatalf("result stdout %q", out.Stdout)
	}
	if firstAt == 0 || doneAt-firstAt < 800*time.Millisecond {
		t.Fatalf("line 1 came as progress at %v, the result at %v: want it well before", firstAt, doneAt)
	}
	prog, _, _ := probe.snapshot()
	for i := 1; i < len(prog); i++ {
		if prog[i].Progress <= prog[i-1].Progress {
			t.Fatalf("progress not increasing: %+v after %+v", prog[i], prog[i-1])
		}
	}
}
