package mcp

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/confirm"
)

// clientProbe records what a client is sent while a call is held.
type clientProbe struct {
	mu          sync.Mutex
	progress    []*sdk.ProgressNotificationParams
	elicits     []*sdk.ElicitParams
	completions []string
}

func (p *clientProbe) options(url bool) *sdk.ClientOptions {
	o := &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			p.mu.Lock()
			p.progress = append(p.progress, r.Params)
			p.mu.Unlock()
		},
	}
	if url {
		o.Capabilities = &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}}
		o.ElicitationHandler = func(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			p.mu.Lock()
			p.elicits = append(p.elicits, r.Params)
			p.mu.Unlock()
			return &sdk.ElicitResult{Action: "accept"}, nil
		}
		o.ElicitationCompleteHandler = func(_ context.Context, r *sdk.ElicitationCompleteNotificationRequest) {
			p.mu.Lock()
			p.completions = append(p.completions, r.Params.ElicitationID)
			p.mu.Unlock()
		}
	}
	return o
}

func (p *clientProbe) snapshot() (prog []*sdk.ProgressNotificationParams, el []*sdk.ElicitParams, done []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append(prog, p.progress...), append(el, p.elicits...), append(done, p.completions...)
}

// callAsync calls a tool with a progress token in the background.
func callAsync(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) <-chan *sdk.CallToolResult {
	t.Helper()
	ch := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args,
			Meta: sdk.Meta{"progressToken": "tok-1"}})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			res = &sdk.CallToolResult{IsError: true}
		}
		ch <- res
	}()
	return ch
}

func await(t *testing.T, ch <-chan *sdk.CallToolResult) *sdk.CallToolResult {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(60 * time.Second):
		t.Fatal("the call did not return")
		return nil
	}
}

var waitingRe = regexp.MustCompile(`^waiting for approval (apr_[0-9a-f]{32}): HIGH, subprocess spawns processes \(\d+ s left\)`)

// TestApprovalOverMCP: a held run_code keeps its client informed (progress
// notifications naming the approval, a URL elicitation to the page, its
// completion once decided), the approver sees the request as coming over
// MCP from this client, and an approval over the hub lets it run.
func TestApprovalOverMCP(t *testing.T) {
	e := newEnv(t, envOpts{})
	probe := &clientProbe{}
	cs := e.connect(agentTok, probe.options(true))
	ch := callAsync(t, cs, "run_code", map[string]any{"code": highRisk})
	pending := e.waitPending()
	if pending.Via != "MCP (sandgate-test 0.1)" || pending.Principal != "agent-a" || !strings.HasPrefix(pending.SessionID, "mcp-") {
		t.Fatalf("the approver sees via %q principal %q session %q", pending.Via, pending.Principal, pending.SessionID)
	}
	// Let a few intervals pass: notifications keep coming while held.
	time.Sleep(700 * time.Millisecond)
	if _, err := e.hub.Decide(t.Context(), pending.ID, confirm.Approver{Name: "alice", Role: "approver"},
		confirm.Decision{Decision: "approve", Digest: pending.Digest}); err != nil {
		t.Fatal(err)
	}
	res := await(t, ch)
	var out runOutput
	structured(t, res, &out)
	if out.Stdout != "approved run\n" || out.Approval == nil || out.Approval.ID != pending.ID ||
		out.Approval.Status != "approved" || out.Approval.DecidedBy != "alice" || out.Decision.Action != "require_approval" {
		t.Fatalf("output %+v approval %+v", out, out.Approval)
	}
	prog, elicits, done := probe.snapshot()
	if len(prog) < 3 {
		t.Fatalf("%d progress notifications while held, want several: %+v", len(prog), prog)
	}
	m := waitingRe.FindStringSubmatch(prog[0].Message)
	if m == nil || m[1] != pending.ID || !strings.Contains(prog[0].Message, "approval page: "+e.srv.URL+"/#"+pending.ID) {
		t.Fatalf("first progress %q", prog[0].Message)
	}
	// Once approved the run's output follows ("output: ..."; see
	// TestOutputAsProgress), with values that keep increasing.
	held := prog
	for i, p := range prog {
		if strings.HasPrefix(p.Message, "output: ") {
			held = prog[:i]
			break
		}
	}
	for i := 1; i < len(prog); i++ {
		if prog[i].Progress <= prog[i-1].Progress || prog[i].ProgressToken != "tok-1" || i < len(held) && prog[i].Total < 100 {
			t.Fatalf("progress %d: %+v after %+v", i, prog[i], prog[i-1])
		}
	}
	if last := held[len(held)-1].Message; last != "approval "+pending.ID+": approved by alice; running" {
		t.Errorf("last approval progress %q", last)
	}
	if len(elicits) != 1 || elicits[0].Mode != "url" || elicits[0].URL != e.srv.URL+"/#"+pending.ID ||
		elicits[0].ElicitationID != pending.ID {
		t.Fatalf("elicitations %+v", elicits)
	}
	if len(done) != 1 || done[0] != pending.ID {
		t.Errorf("elicitation completions %v", done)
	}
}

// TestApprovalRefusals: a denial and a timeout are isError results with
// their codes; a client without elicitation gets none and still gets
// progress; a client without a progress token gets neither and still
// waits.
func TestApprovalRefusals(t *testing.T) {
	// The denial gets the default (long) approval timeout: finding the
	// pending approval and deciding it must not race a short one on a
	// loaded machine. Only the timeout case below uses a short timeout.
	e := newEnv(t, envOpts{})
	probe := &clientProbe{}
	cs := e.connect(agentTok, probe.options(false))
	ch := callAsync(t, cs, "run_code", map[string]any{"code": highRisk})
	pending := e.waitPending()
	if _, err := e.hub.Decide(t.Context(), pending.ID, confirm.Approver{Name: "bob"}, confirm.Decision{Decision: "deny", Reason: "not today"}); err != nil {
		t.Fatal(err)
	}
	res := await(t, ch)
	body := errorOf(t, res)
	if body.Code != "approval_denied" || !strings.HasPrefix(text(res), "approval_denied: ") || !strings.Contains(text(res), "not today") {
		t.Fatalf("denied: %+v %q", body, text(res))
	}
	// The client handles notifications on its own goroutine: the last one
	// may still be on its way when the result is.
	prog, elicits, _ := probe.snapshot()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); prog, elicits, _ = probe.snapshot() {
		if len(prog) > 0 && strings.Contains(prog[len(prog)-1].Message, "denied by") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(prog) == 0 || len(elicits) != 0 {
		t.Fatalf("without url elicitation: %d progress, %d elicitations", len(prog), len(elicits))
	}
	if last := prog[len(prog)-1].Message; last != "approval "+pending.ID+": denied by bob" {
		t.Errorf("last progress %q", last)
	}
	// No progress token: the call waits silently and times out. 1.5 s is
	// several progress intervals (200 ms), so a notification sent without
	// a token would show.
	et := newEnv(t, envOpts{approvalTimeout: 1500 * time.Millisecond})
	silent := &clientProbe{}
	cs = et.connect(agentTok, silent.options(false))
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": highRisk}})
	if err != nil {
		t.Fatal(err)
	}
	if body := errorOf(t, res); body.Code != "approval_timeout" {
		t.Fatalf("timeout: %+v %q", body, text(res))
	}
	if after, elicits, _ := silent.snapshot(); len(after) != 0 || len(elicits) != 0 {
		t.Errorf("a call without a progress token got %d notifications, %d elicitations", len(after), len(elicits))
	}
}

// TestDenialToldWhenTheCallEndsWithIt: a denial ends the call right after
// its decision. Held until the call has ended, the watch finds both the
// decision and the end ready, and must still send "denied by" before the
// result (select picks at random between ready cases, so a watch that
// did not look for the decision at the end missed it half the time).
func TestDenialToldWhenTheCallEndsWithIt(t *testing.T) {
	testHookWatching = func(w *approvalWatch) { <-w.quit }
	t.Cleanup(func() { testHookWatching = func(*approvalWatch) {} })
	e := newEnv(t, envOpts{})
	for i := range 8 {
		probe := &clientProbe{}
		cs := e.connect(agentTok, probe.options(false))
		ch := callAsync(t, cs, "run_code", map[string]any{"code": highRisk})
		pending := e.waitPending()
		if _, err := e.hub.Decide(t.Context(), pending.ID, confirm.Approver{Name: "bob"}, confirm.Decision{Decision: "deny"}); err != nil {
			t.Fatal(err)
		}
		if body := errorOf(t, await(t, ch)); body.Code != "approval_denied" {
			t.Fatalf("call %d: %+v", i, body)
		}
		want := "approval " + pending.ID + ": denied by bob"
		prog, _, _ := probe.snapshot()
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); prog, _, _ = probe.snapshot() {
			if len(prog) > 0 && prog[len(prog)-1].Message == want {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(prog) == 0 || prog[len(prog)-1].Message != want {
			t.Fatalf("call %d: last progress of %d is not %q", i, len(prog), want)
		}
	}
}
