package mcp

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/executors/output"
)

// outputInterval is how often a long run's new output is reported: often
// enough to follow, rarely enough not to flood a client with one
// notification per line.
const outputInterval = time.Second

// progressTextMax bounds one notification's message: the tail of the new
// output. The whole output is in the call's result, under the usual caps.
const progressTextMax = 1024

// outputWatch reports a run's output as progress notifications while it
// runs (DESIGN.md §10): the executor's chunks go to a queue that never
// blocks the run (output.Queue), and a goroutine sends what arrived every
// interval, the progress value being the bytes so far. Without a progress
// token from the client it does nothing.
type outputWatch struct {
	q    *output.Queue
	prog *progress
	quit chan struct{}
	done chan struct{}
	base float64 // the progress value when the run started
	sent int     // bytes reported so far
}

func watchOutput(ctx context.Context, prog *progress, every time.Duration) *outputWatch {
	w := &outputWatch{prog: prog, quit: make(chan struct{}), done: make(chan struct{})}
	if !prog.enabled() {
		close(w.done)
		return w
	}
	w.q = output.NewQueue(0)
	go w.run(ctx, every)
	return w
}

// push is the run's output hook (manager.RunRequest.OnOutput).
func (w *outputWatch) push(c output.Chunk) {
	if w.q != nil {
		w.q.Push(c)
	}
}

// stop flushes what is left and waits, so nothing is sent after the
// call's result.
func (w *outputWatch) stop() {
	if w.q == nil {
		return
	}
	close(w.quit)
	<-w.done
}

func (w *outputWatch) run(ctx context.Context, every time.Duration) {
	defer close(w.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.quit:
			w.flush(ctx)
			return
		case <-t.C:
			w.flush(ctx)
		}
	}
}

func (w *outputWatch) flush(ctx context.Context) {
	chunks := w.q.Take()
	if len(chunks) == 0 {
		return
	}
	var b strings.Builder
	for _, c := range chunks {
		w.sent += len(c.Data)
		b.Write(c.Data)
	}
	if w.base == 0 {
		w.prog.mu.Lock()
		w.base = w.prog.last
		w.prog.mu.Unlock()
	}
	w.prog.send(ctx, w.base+float64(w.sent), 0, "output: "+tailText(b.String(), progressTextMax))
}

// tailText keeps the last n bytes of s, on a rune boundary.
func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return "…" + s
}
