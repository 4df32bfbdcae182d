package manager_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// canary is in every test program (as a comment), so a test can prove the
// code text never reaches a place it must not (audit records, policy input).
const canary = "sg-canary-7f3a"

// Programs with a known risk level under the built-in analysis.
const (
	safePython   = "print('hi')  # " + canary + "\n"   // SAFE, proven: subprocess in STRICT
	lowBash      = "ls -la # " + canary + "\n"         // LOW: docker in STRICT
	highPython   = "import socket  # " + canary + "\n" // HIGH: approval, docker
	criticalBash = "rm -rf / # " + canary + "\n"       // CRITICAL: deny in STRICT
)

// sharedEngine is the embedded default policy, compiled once per test binary.
var sharedEngine = sync.OnceValues(func() (*policy.Engine, error) {
	return policy.New(context.Background(), policy.Options{EvalTimeout: policytest.EvalTimeout})
})

func realPolicy(t *testing.T) *policy.Engine {
	t.Helper()
	e, err := sharedEngine()
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	return e
}

// recDecider records every policy input. It asks the real engine, or
// returns fixed when that is set.
type recDecider struct {
	inner manager.Decider
	fixed *policy.Decision

	mu     sync.Mutex
	inputs []policy.Input
}

func (d *recDecider) Decide(ctx context.Context, in policy.Input) policy.Decision {
	d.mu.Lock()
	d.inputs = append(d.inputs, in)
	d.mu.Unlock()
	if d.fixed != nil {
		return *d.fixed
	}
	return d.inner.Decide(ctx, in)
}

func (d *recDecider) Inputs() []policy.Input {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]policy.Input(nil), d.inputs...)
}

// fakeConfirm answers with outcome/err (or fn) and records what it was asked.
type fakeConfirm struct {
	outcome confirm.Outcome
	err     error
	fn      func(ctx context.Context, req confirm.Request) (confirm.Outcome, error)

	mu   sync.Mutex
	reqs []confirm.Request
}

func (c *fakeConfirm) Confirm(ctx context.Context, req confirm.Request) (confirm.Outcome, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	if c.fn != nil {
		return c.fn(ctx, req)
	}
	return c.outcome, c.err
}

func (c *fakeConfirm) Requests() []confirm.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]confirm.Request(nil), c.reqs...)
}

// releasingFake is a Fake that also keeps per-session state.
type releasingFake struct {
	*executortest.Fake
	err error

	mu       sync.Mutex
	released []string
}

var _ executors.SessionReleaser = (*releasingFake)(nil)

func (f *releasingFake) ReleaseSession(_ context.Context, id string) error {
	f.mu.Lock()
	f.released = append(f.released, id)
	f.mu.Unlock()
	return f.err
}

func (f *releasingFake) Released() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.released...)
}

// ctxStore refuses writes on a done context, the way a real database
// driver does; audit.Memory alone ignores its context.
type ctxStore struct{ *audit.Memory }

func (s ctxStore) Append(ctx context.Context, rec *audit.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Memory.Append(ctx, rec)
}

type hopts struct {
	cfg       manager.Config // Mode "" means STRICT
	decision  *policy.Decision
	noConfirm bool
	noEgress  bool
	// execs replaces the default subprocess and docker fakes.
	execs   []executors.Executor
	store   audit.Store // default: h.audit
	metrics *manager.Metrics
	layouts map[string]manager.Layout
}

// harness is a Manager wired with real risk, policy, workspace and audit
// parts and fake executors and approval service.
type harness struct {
	m       *manager.Manager
	audit   *audit.Memory
	ws      *workspace.Workspaces
	sub     *executortest.Fake
	docker  *executortest.Fake
	confirm *fakeConfirm
	decider *recDecider
	egress  *fakeEgress
}

// fakeEgress records the bindings the manager asks handles for.
type fakeEgress struct {
	mu       sync.Mutex
	bindings []egress.Binding
}

type fakeHandle struct{ b egress.Binding }

func (fakeHandle) ServeConn(_ context.Context, c net.Conn) { c.Close() }
func (fakeHandle) CACertPEM() []byte                       { return nil }

func (f *fakeEgress) ForRun(b egress.Binding) executors.Egress {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bindings = append(f.bindings, b)
	return fakeHandle{b: b}
}

func newHarness(t *testing.T, o hopts) *harness {
	t.Helper()
	ws, err := workspace.New(t.TempDir()+"/ws", workspace.Options{})
	if err != nil {
		t.Fatalf("workspace.New: %v", err)
	}
	h := &harness{
		audit:   audit.NewMemory(),
		ws:      ws,
		sub:     &executortest.Fake{KindValue: executors.KindSubprocess},
		docker:  &executortest.Fake{KindValue: executors.KindDocker},
		confirm: &fakeConfirm{outcome: confirm.Outcome{ApprovalID: "ap-1", Status: confirm.StatusApproved, DecidedBy: "alice"}},
		decider: &recDecider{fixed: o.decision},
		egress:  &fakeEgress{},
	}
	if o.decision == nil {
		h.decider.inner = realPolicy(t)
	}
	if o.cfg.Mode == "" {
		o.cfg.Mode = "STRICT"
	}
	execs := o.execs
	if execs == nil {
		execs = []executors.Executor{h.sub, h.docker}
	}
	deps := manager.Deps{
		Assessor:   risk.NewAssessor(nil, nil),
		Policy:     h.decider,
		Executors:  execs,
		Workspaces: ws,
		Audit:      h.audit,
		Metrics:    o.metrics,
		Layouts:    o.layouts,
	}
	if o.store != nil {
		deps.Audit = o.store
	}
	if !o.noConfirm {
		deps.Confirm = h.confirm
	}
	if !o.noEgress {
		deps.Egress = h.egress
	}
	h.m, err = manager.New(o.cfg, deps)
	if err != nil {
		t.Fatalf("manager.New: %v", err)
	}
	return h
}

// request is a valid run_code request for code in language.
func request(language, code string) manager.RunRequest {
	return manager.RunRequest{
		RequestID: "req-1",
		Kind:      manager.KindRunCode,
		Principal: manager.Principal{Role: "agent", Name: "ci-bot", Tenant: "t1"},
		SessionID: "s1",
		Language:  language,
		Code:      code,
	}
}

// oneRecord returns the only audit record, failing unless there is exactly
// one.
func (h *harness) oneRecord(t *testing.T) audit.Record {
	t.Helper()
	recs := h.audit.Records()
	if len(recs) != 1 {
		t.Fatalf("%d audit records, want exactly 1: %+v", len(recs), recs)
	}
	return recs[0]
}

// assertNoCode fails when the record's JSON holds any of the code text.
func assertNoCode(t *testing.T, rec audit.Record, code string) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), canary) || (len(code) > 0 && strings.Contains(string(b), strings.TrimSpace(code))) {
		t.Errorf("audit record carries the code text: %s", b)
	}
}

func ptr[T any](v T) *T { return &v }

// availableKinds lists the available executors of a policy input, sorted
// and comma-separated.
func availableKinds(in map[string]policy.ExecutorState) string {
	var kinds []string
	for kind, st := range in {
		if st.Available {
			kinds = append(kinds, kind)
		}
	}
	slices.Sort(kinds)
	return strings.Join(kinds, ",")
}

func isRoot() bool { return os.Geteuid() == 0 }

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// agent is the caller of request and fileReq: tenant t1's agent.
var agent = manager.Principal{Role: "agent", Name: "ci-bot", Tenant: "t1"}

// key is the workspace key of t1's session id.
func key(id string) string { return workspace.Key("t1", id) }
