package kernel

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/executors"
)

//go:embed driver.py
var driverScript string

// Command is the driver's command line inside the sandbox. python3 -I
// ignores PYTHON* variables and the user site; -u keeps the protocol
// unbuffered.
func Command() []string {
	return []string{"python3", "-I", "-u", "-c", driverScript}
}

// Errors of a Conn. Both mean the kernel's sandbox must be discarded: the
// next cell starts a new one and says the kernel was restarted.
var (
	// ErrGone: the driver's stream ended (the sandbox died, the driver
	// was killed or failed).
	ErrGone = errors.New("kernel driver gone")
	// ErrStuck: the driver did not finish a cell in time although it
	// was interrupted and given its grace to restart the kernel.
	ErrStuck = errors.New("kernel driver did not answer")
)

// Defaults of the Conn's waits.
const (
	// DefaultMaxResultBytes is a cell's budget for display outputs
	// (base64 PNGs included) when the Cell names none: a few dozen
	// figures.
	DefaultMaxResultBytes = 8 << 20
	// maxLine bounds one protocol line; the driver never sends a bundle
	// over the cell's budget, so only a broken driver comes near it.
	maxLine = 64 << 20
	// stuckGrace is how long past its timeout a cell may take before the
	// Conn gives up on the driver: its interrupt grace (5 s, renewed by the
	// cell's traceback and status) plus a kernel restart on a loaded machine.
	stuckGrace = 90 * time.Second
)

// Cell is one stateful run.
type Cell struct {
	Code    string
	Timeout time.Duration
	// MaxResultBytes caps the JSON size of the cell's display outputs;
	// zero means DefaultMaxResultBytes.
	MaxResultBytes int
	// Mask lists host paths to replace with /workspace in text results,
	// as output.Options.Mask does for stdout.
	Mask []string
}

// Outcome is a finished cell.
type Outcome struct {
	Results []executors.Bundle
	// Dropped is set when a display output was over the budget.
	Dropped bool
	// ExitCode is 0 for a cell that ran to the end, 1 for one that raised,
	// 124 for one that timed out, and the kernel's exit status (128+signal
	// for a signal) for one whose kernel died.
	ExitCode int
	TimedOut bool
	// Restarted: the kernel was started afresh for this cell (the one
	// before had died) or during it (it ignored its interrupt).
	Restarted bool
	// Died: the kernel died during the cell; the next one restarts it.
	Died bool
}

// event is one line from the driver.
type event struct {
	Ev        string                     `json:"ev"`
	Name      string                     `json:"name"`
	Text      string                     `json:"text"`
	Data      map[string]json.RawMessage `json:"data"`
	Ename     string                     `json:"ename"`
	Evalue    string                     `json:"evalue"`
	Traceback []string                   `json:"traceback"`
	Status    string                     `json:"status"`
	TimedOut  bool                       `json:"timed_out"`
	Restarted bool                       `json:"restarted"`
	Lost      bool                       `json:"lost"`
	Exit      int                        `json:"exit_status"`
	Message   string                     `json:"message"`
}

// Conn is the executor's end of one driver. One cell runs at a time:
// callers queue (Acquire) as Jupyter queues cells.
type Conn struct {
	w      io.Writer
	events chan event
	done   chan struct{} // closed when the driver's stream ends
	turn   chan struct{} // one-slot semaphore: the running cell
	quit   chan struct{} // closed by Close: the reader stops
	once   sync.Once
	wmu    sync.Mutex
	endErr error // why the stream ended; read after done
}

// New starts reading the driver's events from r; requests go to w.
func New(w io.Writer, r io.Reader) *Conn {
	c := &Conn{w: w, events: make(chan event, 64), done: make(chan struct{}), turn: make(chan struct{}, 1),
		quit: make(chan struct{})}
	go c.read(r)
	return c
}

func (c *Conn) read(r io.Reader) {
	defer close(c.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			c.endErr = fmt.Errorf("%w: bad line: %w", ErrGone, err)
			return
		}
		select {
		case c.events <- ev:
		case <-c.quit:
			c.endErr = ErrGone
			return
		}
	}
	c.endErr = fmt.Errorf("%w: %w", ErrGone, errOr(sc.Err(), io.EOF))
}

func errOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// Close stops reading; the caller closes the stream itself.
func (c *Conn) Close() { c.once.Do(func() { close(c.quit) }) }

// Alive reports whether the driver's stream is still open.
func (c *Conn) Alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Acquire waits for the kernel's turn; release gives it back.
func (c *Conn) Acquire(ctx context.Context) (release func(), err error) {
	select {
	case c.turn <- struct{}{}:
		return func() { <-c.turn }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Ready waits for the driver's first kernel to answer.
func (c *Conn) Ready(ctx context.Context) error {
	ev, err := c.next(ctx)
	if err != nil {
		return err
	}
	switch ev.Ev {
	case "ready":
		return nil
	case "fatal":
		return fmt.Errorf("%w: %s", ErrGone, ev.Message)
	}
	return fmt.Errorf("%w: unexpected %q before ready", ErrGone, ev.Ev)
}

// Restart asks the driver for a fresh kernel. The caller holds the turn.
func (c *Conn) Restart(ctx context.Context) error {
	if err := c.send(map[string]any{"op": "restart"}); err != nil {
		return err
	}
	for {
		ev, err := c.next(ctx)
		if err != nil {
			return err
		}
		switch ev.Ev {
		case "restarted":
			return nil
		case "fatal":
			return fmt.Errorf("%w: %s", ErrGone, ev.Message)
		}
	}
}

func (c *Conn) next(ctx context.Context) (event, error) { return c.nextBefore(ctx, nil) }

// nextBefore is next, or ErrStuck when timer fires first.
func (c *Conn) nextBefore(ctx context.Context, timer <-chan time.Time) (event, error) {
	select {
	case ev := <-c.events:
		return ev, nil
	case <-timer:
		return event{}, ErrStuck
	case <-c.done:
		select { // events read before the end come first
		case ev := <-c.events:
			return ev, nil
		default:
		}
		return event{}, c.endErr
	case <-ctx.Done():
		return event{}, context.Cause(ctx)
	}
}

func (c *Conn) send(req map[string]any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("kernel: request: %w", err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%w: write: %w", ErrGone, err)
	}
	return nil
}

// Run executes cell, writing its stdout and stderr (tracebacks included)
// to the writers as they come. The caller holds the turn. When ctx ends
// the cell is interrupted and Run returns ctx's cause once the driver
// has finished the cell (the kernel and its state survive); if the
// driver ends or never finishes, Run returns ErrGone or ErrStuck and
// the caller must discard the sandbox.
func (c *Conn) Run(ctx context.Context, cell Cell, stdout, stderr io.Writer) (Outcome, error) {
	budget := cell.MaxResultBytes
	if budget <= 0 {
		budget = DefaultMaxResultBytes
	}
	err := c.send(map[string]any{"op": "execute", "code": cell.Code,
		"timeout_ms": max(cell.Timeout.Milliseconds(), 1), "max_result_bytes": budget})
	if err != nil {
		return Outcome{}, err
	}
	stuck := time.NewTimer(cell.Timeout + stuckGrace)
	defer stuck.Stop()
	var out Outcome
	var cancelled error
	waitCtx := ctx
	for {
		ev, err := c.nextBefore(waitCtx, stuck.C)
		switch {
		case errors.Is(err, ErrStuck):
			return out, ErrStuck
		case err != nil && waitCtx.Err() != nil && cancelled == nil:
			// The client went away: interrupt, then wait for the end of
			// the cell, bounded by stuck.
			cancelled = err
			waitCtx = context.WithoutCancel(ctx)
			if err := c.send(map[string]any{"op": "interrupt"}); err != nil {
				return out, err
			}
			continue
		case err != nil:
			return out, err
		}
		if c.apply(ev, cell.Mask, &out, stdout, stderr) {
			if cancelled != nil {
				return out, cancelled
			}
			return out, nil
		}
	}
}

// apply folds one event into out; it reports whether the cell is done.
func (c *Conn) apply(ev event, mask []string, out *Outcome, stdout, stderr io.Writer) bool {
	switch ev.Ev {
	case "stream":
		w := stdout
		if ev.Name == "stderr" {
			w = stderr
		}
		_, _ = io.WriteString(w, ev.Text)
	case "display":
		out.Results = append(out.Results, maskBundle(ev.Data, mask))
	case "dropped":
		out.Dropped = true
	case "error":
		_, _ = io.WriteString(stderr, plainTraceback(ev))
	case "fatal":
		_, _ = io.WriteString(stderr, "sandgate: the kernel driver failed\n")
		out.Died, out.ExitCode = true, 1
		return true
	case "done":
		out.TimedOut = ev.TimedOut
		out.Restarted = ev.Restarted || ev.Lost
		switch {
		case ev.Status == "died":
			out.Died, out.ExitCode = true, ev.Exit
			if out.ExitCode <= 0 {
				out.ExitCode = 1
			}
			fmt.Fprintf(stderr, "sandgate: the kernel died (exit status %d); the next call starts a new one\n", out.ExitCode)
		case ev.TimedOut:
			out.ExitCode = executors.ExitCodeTimeout
		case ev.Status != "ok":
			out.ExitCode = 1
		}
		return true
	}
	return false
}

// ansi matches terminal colour sequences, which NoColor should already
// have kept out of tracebacks.
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

func plainTraceback(ev event) string {
	if len(ev.Traceback) == 0 {
		return ev.Ename + ": " + ev.Evalue + "\n"
	}
	return ansi.ReplaceAllString(strings.Join(ev.Traceback, "\n"), "") + "\n"
}

// maskBundle replaces host paths in the bundle's string values.
func maskBundle(data map[string]json.RawMessage, mask []string) executors.Bundle {
	b := executors.Bundle(data)
	if len(mask) == 0 {
		return b
	}
	for mime, raw := range b {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			continue
		}
		masked := s
		for _, p := range mask {
			masked = strings.ReplaceAll(masked, p, "/workspace")
		}
		if masked != s {
			nb, err := json.Marshal(masked)
			if err == nil {
				b[mime] = nb
			}
		}
	}
	return b
}
