package policy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/plugins/logs"
	"github.com/open-policy-agent/opa/v1/server"
)

// Decision-log paths: the rule each decision asked, as OPA writes the path
// of a /v1/data request in its events.
const (
	execLogPath    = "sandgate/exec/decision"
	browserLogPath = "sandgate/browser/decision"
	egressLogPath  = "sandgate/egress/decision"
)

// decisionQueue is how many decisions may wait for the decision-log plugin.
// A decision waits for room rather than being dropped: the log is meant to
// hold every decision. OPA's own buffer behind it is where an upload outage
// accumulates (buffer_size_limit_bytes, unlimited by default).
const decisionQueue = 4096

// newDecisionID is a random UUID (version 4), the form OPA gives its
// decision_id. It joins a decision-log event to the audit record.
func newDecisionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// DecisionLogStats is what the engine knows of its decision log.
type DecisionLogStats struct {
	// Logged counts decisions OPA's plugin took (after its drop rules).
	Logged uint64 `json:"logged"`
	// Failed counts decisions the plugin refused (its error is logged).
	Failed uint64 `json:"failed"`
	// Queued is how many decisions wait for the plugin now.
	Queued int `json:"queued"`
	// BufferType and Buffered are OPA's upload buffer ("size": bytes,
	// "event": events) waiting for the next upload, which grows while the
	// receiver is down.
	BufferType string `json:"buffer_type"`
	Buffered   int64  `json:"buffered"`
}

// logEvent is one decision on its way to the plugin. It holds what
// Decide already had; turning it into OPA's event (JSON values, masks)
// happens off the request path.
type logEvent struct {
	id       string
	path     string
	inputAST ast.Value      // exec: the value evaluated
	input    map[string]any // browser, egress: built for this decision alone
	result   any            // the enforced decision (a Decision, BrowserDecision or EgressDecision)
	c        *compiled
	at       time.Time
}

// decisionLogger hands decisions to OPA's decision-log plugin from one
// goroutine. The plugin's Log evaluates the mask and drop rules and
// converts the input, which took a decision from 71 to 143 µs when done
// inline (research/policy.md §1.7): the request path only queues.
type decisionLogger struct {
	plugin *logs.Plugin
	log    *slog.Logger
	ch     chan logEvent
	done   chan struct{}

	mu     sync.RWMutex // held for reading while sending, so close never races a send
	closed bool

	logged, failed atomic.Uint64
}

func newDecisionLogger(p *logs.Plugin, log *slog.Logger) *decisionLogger {
	d := &decisionLogger{plugin: p, log: log, ch: make(chan logEvent, decisionQueue), done: make(chan struct{})}
	go d.run()
	return d
}

// enqueue queues ev, waiting when the queue is full. After close it drops
// ev: the engine decides after Close, but nothing uploads any more.
func (d *decisionLogger) enqueue(ev logEvent) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return
	}
	d.ch <- ev
}

func (d *decisionLogger) run() {
	defer close(d.done)
	ctx := context.Background()
	for ev := range d.ch {
		info, err := ev.info()
		if err == nil {
			err = d.plugin.Log(ctx, info)
		}
		if err != nil {
			d.failed.Add(1)
			d.log.Error("decision log", "decision_id", ev.id, "err", err)
			continue
		}
		d.logged.Add(1)
	}
}

// close waits until every queued decision is in the plugin's buffer (the
// plugin's Stop then uploads it).
func (d *decisionLogger) close(ctx context.Context) {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.ch)
	}
	d.mu.Unlock()
	select {
	case <-d.done:
	case <-ctx.Done():
	}
}

func (d *decisionLogger) stats() DecisionLogStats {
	typ, n := d.plugin.BufferSize()
	return DecisionLogStats{Logged: d.logged.Load(), Failed: d.failed.Load(), Queued: len(d.ch), BufferType: typ, Buffered: n}
}

// info is ev as the server.Info OPA's plugin logs: fresh JSON values (the
// mask rules edit them in place), the revision of every bundle, and the
// enforced decision as the result.
func (ev logEvent) info() (*server.Info, error) {
	var input any
	var err error
	switch {
	case ev.inputAST != nil:
		if input, err = ast.JSON(ev.inputAST); err != nil {
			return nil, err
		}
	case ev.input != nil:
		input = ev.input
	}
	result, err := resultValue(ev.result)
	if err != nil {
		return nil, err
	}
	info := &server.Info{
		DecisionID: ev.id, Path: ev.path, Timestamp: ev.at, Results: &result,
	}
	if input != nil {
		info.Input = &input
	}
	if ev.c != nil {
		info.Revision = ev.c.revision
		if len(ev.c.bundles) > 0 {
			info.Bundles = make(map[string]server.BundleInfo, len(ev.c.bundles))
			for name, rev := range ev.c.bundles {
				info.Bundles[name] = server.BundleInfo{Revision: rev}
			}
		}
	}
	return info, nil
}

// resultValue is a decision as a JSON value, without its decision_id
// (the event carries it).
func resultValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	delete(m, "decision_id")
	return m, nil
}

// logDecision queues one decision when decision logs are on.
func (e *Engine) logDecision(ev logEvent) {
	if e.opa == nil || e.opa.logger == nil {
		return
	}
	ev.at = time.Now()
	e.opa.logger.enqueue(ev)
}
