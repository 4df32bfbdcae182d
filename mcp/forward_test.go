package mcp

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/manager"
)

// elsewhere is a placement that says every session is served by the
// replica at url.
type elsewhere struct{ url string }

func (p elsewhere) Claim(context.Context, string) (manager.Owner, error) {
	return manager.Owner{Replica: "a", URL: p.url}, nil
}
func (elsewhere) Release(context.Context, string) error { return nil }
func (elsewhere) Name() string                          { return "b" }

// httpFleet posts forwarded calls as fleet.Router does, without the hop
// signature (the test owner's route takes the request id from a header).
type httpFleet struct{ calls atomic.Int32 }

func (f *httpFleet) CallTool(ctx context.Context, url, authorization, requestID string, body []byte, line func([]byte)) error {
	f.calls.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+ForwardPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", authorization)
	req.Header.Set("X-Test-Request-Id", requestID)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("owner answered %d", res.StatusCode)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		line(sc.Bytes())
	}
	return sc.Err()
}

// TestToolCallForwardedToTheOwner: a client connected to replica B calls
// tools for a session replica A serves. Each call runs on A (its audit
// record is there, under B's request id, naming the client B saw); a
// held call's progress and its URL elicitation (and its completion)
// reach the client through B; the approval is
// decided on A and the output comes back; an error result comes back as
// the owner's error, with its code; a file written by one call is read by
// the next.
func TestToolCallForwardedToTheOwner(t *testing.T) {
	a := newEnv(t, envOpts{})
	fl := &httpFleet{}
	b := newEnv(t, envOpts{placement: elsewhere{url: a.srv.URL}, fleet: fl})
	probe := &clientProbe{}
	cs := b.connect(agentTok, probe.options(true)) // with URL elicitation

	ch := callAsync(t, cs, "run_code", map[string]any{"code": highRisk, "session_id": "shared"})
	v := a.waitPending()
	if len(b.hub.Pending()) != 0 {
		t.Fatal("the held call is pending on B too")
	}
	if !strings.Contains(v.Via, "sandgate-test") {
		t.Errorf("the approval on A does not name the client B saw: via %q", v.Via)
	}
	waitFor(t, func() bool { prog, _, _ := probe.snapshot(); return len(prog) > 0 }) // relayed through B
	if _, err := a.hub.Decide(t.Context(), v.ID, confirm.Approver{Name: "alice", Role: "approver"},
		confirm.Decision{Decision: "approve"}); err != nil {
		t.Fatal(err)
	}
	var out runOutput
	structured(t, await(t, ch), &out)
	waitFor(t, func() bool { _, _, done := probe.snapshot(); return len(done) == 1 })
	if _, el, done := probe.snapshot(); len(el) != 1 || el[0].ElicitationID != v.ID || !strings.Contains(el[0].URL, v.ID) ||
		done[0] != v.ID {
		t.Fatalf("the held call's URL elicitation through B: %+v, completed %v; want one for %s", el, done, v.ID)
	}
	if out.Stdout != "approved run\n" || out.Approval == nil || out.Approval.Status != "approved" {
		t.Fatalf("forwarded run: %+v", out)
	}
	recs := a.records("shared")
	if len(recs) != 1 || recs[0].RequestID != out.RequestID {
		t.Fatalf("A's audit for the session: %+v; want the forwarded call's record, id %s", recs, out.RequestID)
	}
	if recs[0].Detail["front_end"] != "mcp" {
		t.Errorf("A's record names front end %q, want mcp", recs[0].Detail["front_end"])
	}
	if len(b.records("shared")) != 0 {
		t.Fatal("B wrote an audit record for a call A ran")
	}

	structured(t, callTool(t, cs, "write_file", map[string]any{"path": "f.txt", "content": "via b\n", "session_id": "shared"}), &struct{}{})
	var read readFileOutput
	structured(t, callTool(t, cs, "read_file", map[string]any{"path": "f.txt", "session_id": "shared"}), &read)
	if !strings.Contains(read.Content, "via b") {
		t.Fatalf("read through B: %+v", read)
	}
	if body := errorOf(t, callTool(t, cs, "execute", map[string]any{"command": criticalBash, "session_id": "shared"})); body.Code != "policy_denied" {
		t.Fatalf("CRITICAL through B: %+v, want policy_denied", body)
	}
	if n := fl.calls.Load(); n != 4 {
		t.Fatalf("%d calls forwarded, want 4", n)
	}
}
