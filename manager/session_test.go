package manager_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// kernelFake is an executor that hosts kernels: a stateful run gets a
// Cell, and KernelRestarted only when this process had started the
// session's kernel before and it died (died).
type kernelFake struct {
	*releasingFake
	mu      sync.Mutex
	kernels map[string]bool
}

func newKernelFake() *kernelFake {
	caps := executortest.FullCapabilities()
	caps.Kernels = true
	k := &kernelFake{releasingFake: &releasingFake{Fake: &executortest.Fake{KindValue: executors.KindDocker, Caps: &caps}},
		kernels: map[string]bool{}}
	k.Fake.ExecuteFunc = func(_ context.Context, spec executors.Spec) (executors.Result, error) {
		res := executors.Result{Stdout: "ok\n"}
		if spec.Stateful {
			k.mu.Lock()
			k.kernels[spec.SessionID] = true
			k.mu.Unlock()
			res.Cell = &executors.CellResult{}
		}
		return res, nil
	}
	return k
}

func (k *kernelFake) live(session string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kernels[session]
}

func (k *kernelFake) ReleaseSession(ctx context.Context, id string) error {
	k.mu.Lock()
	delete(k.kernels, id)
	k.mu.Unlock()
	return k.releasingFake.ReleaseSession(ctx, id)
}

// sessionGateway is a manager on an SQLite database that Start opened, as
// the gateway wires it: what a restart keeps is what the database keeps.
type sessionGateway struct {
	m      *manager.Manager
	kernel *kernelFake
	events *eventSink
}

type eventSink struct {
	mu sync.Mutex
	ev []manager.Event
}

func (s *eventSink) Publish(_ context.Context, es ...manager.Event) error {
	s.mu.Lock()
	s.ev = append(s.ev, es...)
	s.mu.Unlock()
	return nil
}

func (s *eventSink) types() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.ev {
		out = append(out, e.Type)
	}
	return out
}

func startSessions(t *testing.T, dir string) *sessionGateway {
	t.Helper()
	ctx := context.Background()
	db, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(dir, "ws"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := &sessionGateway{kernel: newKernelFake(), events: &eventSink{}}
	allow := policy.Decision{Action: policy.ActionAllow, Executor: string(executors.KindDocker)}
	g.m, err = manager.New(manager.Config{Mode: "STRICT", ReapInterval: 20 * time.Millisecond}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: &recDecider{fixed: &allow}, Executors: []executors.Executor{g.kernel},
		Workspaces: ws, Audit: db, Sessions: db, Events: g.events,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.m.Close(context.Background())
		_ = db.Close()
	})
	return g
}

func (g *sessionGateway) run(t *testing.T, session string, stateful bool) (*manager.RunResult, error) {
	t.Helper()
	req := request("python", "x = 1")
	req.SessionID, req.Stateful = session, stateful
	return g.m.Run(context.Background(), req)
}

func TestSessionLifecycle(t *testing.T) {
	ctx := context.Background()
	g := startSessions(t, t.TempDir())
	info, _, err := g.m.CreateSession(ctx, agent, "labelled", manager.OpenOptions{FrontEnd: "rest",
		Labels: map[string]string{"team": "data"}, Metadata: map[string]string{"ticket": "42"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if info.State != manager.StateActive || info.Labels["team"] != "data" || info.FrontEnd != "rest" ||
		info.ExpiresAt.Before(time.Now().Add(59*time.Minute)) {
		t.Fatalf("created: %+v", info)
	}
	if _, _, err := g.m.CreateSession(ctx, agent, "labelled", manager.OpenOptions{}); !errors.Is(err, manager.ErrSessionExists) {
		t.Fatalf("second create: %v, want ErrSessionExists", err)
	}
	if _, err := g.run(t, "plain", false); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		labels map[string]string
		want   []string
	}{
		{nil, []string{"labelled", "plain"}},
		{map[string]string{"team": "data"}, []string{"labelled"}},
		{map[string]string{"team": "web"}, nil},
	}
	for _, c := range cases {
		page, err := g.m.ListSessions(ctx, agent, manager.SessionQuery{Labels: c.labels})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range page.Sessions {
			got = append(got, s.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("label filter %v: %v, want %v", c.labels, got, c.want)
		}
	}
	patched, err := g.m.PatchSession(ctx, agent, "labelled", manager.SessionPatch{TimeoutS: ptr(7200)})
	if err != nil {
		t.Fatal(err)
	}
	if patched.ExpiresAt.Before(time.Now().Add(119 * time.Minute)) {
		t.Fatalf("PATCH timeout_s 7200: expires %v", patched.ExpiresAt)
	}
	if err := g.m.DeleteSession(ctx, agent, "labelled", true); err != nil {
		t.Fatal(err)
	}
	if _, err := g.m.Session(ctx, agent, "labelled"); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("after delete: %v, want not found", err)
	}
	want := []string{"session.created", "session.created", "run.started", "run.finished", "session.updated", "session.deleted"}
	waitFor(t, func() bool { return slices.Equal(g.events.types(), want) }, func() string {
		return "events " + toJSON(t, g.events.types())
	})
}

// TestSessionExpiry: a session whose TTL or idle timeout passes is
// released through the one release path (its executor state goes), shows
// as expired, and refuses requests until it is deleted.
func TestSessionExpiry(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		patch manager.SessionPatch // set once the session holds a kernel
	}{
		{"ttl", manager.SessionPatch{TimeoutS: ptr(1)}},
		{"idle", manager.SessionPatch{IdleTimeoutS: ptr(1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := startSessions(t, t.TempDir())
			if _, _, err := g.m.CreateSession(ctx, agent, "short", manager.OpenOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := g.run(t, "short", true); err != nil {
				t.Fatal(err)
			}
			if !g.kernel.live(key("short")) {
				t.Fatal("no kernel after a stateful run")
			}
			if _, err := g.m.PatchSession(ctx, agent, "short", c.patch); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
				info, err := g.m.Session(ctx, agent, "short")
				return err == nil && info.State == manager.StateExpired
			}, func() string { return "never expired" })
			if g.kernel.live(key("short")) || !slices.Contains(g.kernel.Released(), key("short")) {
				t.Fatalf("the expired session's kernel was not released: %v", g.kernel.Released())
			}
			_, err := g.run(t, "short", false)
			if code, _, _ := errcode.Of(err); code != errcode.NotFound {
				t.Fatalf("run on an expired session: %v, want not_found", err)
			}
			if !slices.Contains(g.events.types(), "session.expired") {
				t.Fatalf("no session.expired event: %v", g.events.types())
			}
		})
	}
}

// TestRestartTellsWhatWasLost: after a restart (the kill -9 of a gateway
// on SQLite), a session whose kernel was in the old process says so: the
// first stateful cell answers kernel_restarted, once, and GET says what
// was lost.
func TestRestartTellsWhatWasLost(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g := startSessions(t, dir)
	if _, err := g.run(t, "nb", true); err != nil {
		t.Fatal(err)
	}
	// A second process on the same database, as after kill -9 (the first
	// one's Close would release, which a killed process never does).
	g2 := startSessions(t, dir)
	info, err := g2.m.Session(ctx, agent, "nb")
	if err != nil {
		t.Fatal(err)
	}
	if info.Moved == nil || !slices.Contains(info.Moved.Lost, manager.HeldKernel) {
		t.Fatalf("GET after the restart does not say the kernel was lost: %+v", info)
	}
	res, err := g2.run(t, "nb", true)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Result.Cell.KernelRestarted {
		t.Fatal("the first cell after the restart says kernel_restarted: false; its state was lost")
	}
	res, err = g2.run(t, "nb", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Result.Cell.KernelRestarted {
		t.Fatal("the second cell says kernel_restarted again")
	}
}

func waitFor(t *testing.T, ok func() bool, msg func() string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(msg())
		}
	}
}

// TestNoExpiryUnderAWaitingRun: a session whose idle timeout passes while
// a run waits for its approval is not released under it: the run runs
// after the approval, and the session expires, its kernel released, once
// the run is over.
func TestNoExpiryUnderAWaitingRun(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ws, err := workspace.New(filepath.Join(dir, "ws"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kernel := newKernelFake()
	held := policy.Decision{Action: policy.ActionRequireApproval, Executor: string(executors.KindDocker)}
	approveLater := &fakeConfirm{fn: func(ctx context.Context, _ confirm.Request) (confirm.Outcome, error) {
		time.Sleep(time.Second) // ten reaps, ten times the idle timeout
		return confirm.Outcome{ApprovalID: "ap-1", Status: confirm.StatusApproved, DecidedBy: "alice"}, nil
	}}
	m, err := manager.New(manager.Config{Mode: "STRICT", ReapInterval: 20 * time.Millisecond}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: &recDecider{fixed: &held}, Confirm: approveLater,
		Executors: []executors.Executor{kernel}, Workspaces: ws, Audit: db, Sessions: db,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.CreateSession(ctx, agent, "waits", manager.OpenOptions{IdleTimeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	req := request("python", "x = 1")
	req.SessionID, req.Stateful = "waits", true
	if _, err := m.Run(ctx, req); err != nil {
		t.Fatalf("the approved run on a session idle past its timeout while it waited: %v", err)
	}
	waitFor(t, func() bool {
		info, err := m.Session(ctx, agent, "waits")
		return err == nil && info.State == manager.StateExpired
	}, func() string { return "the session never expired after its run" })
	if kernel.live(key("waits")) { // released before the record says expired
		t.Fatal("the kernel the run started was never released")
	}
}

// placementOf is a fleet registry stand-in: this replica's name, and
// whether a claim takes the session (its replica's lease lapsed).
type placementOf struct {
	name  string
	takes bool
}

func (p placementOf) Claim(context.Context, string) (manager.Owner, error) {
	if p.takes {
		return manager.Owner{Local: true, AdoptedFrom: "gone"}, nil
	}
	return manager.Owner{Replica: "gone", URL: "http://127.0.0.1:1"}, nil
}
func (placementOf) Release(context.Context, string) error { return nil }
func (p placementOf) Name() string                        { return p.name }

// TestExpiryOfAGoneReplicasSessions: a session whose replica is gone
// (its lease lapsed, no request came since) still expires: a survivor
// claims it and releases it; while its replica lives, a survivor leaves
// it alone.
func TestExpiryOfAGoneReplicasSessions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ws, err := workspace.New(filepath.Join(dir, "ws"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	replica := func(p placementOf) *manager.Manager {
		allow := policy.Decision{Action: policy.ActionAllow, Executor: string(executors.KindDocker)}
		m, err := manager.New(manager.Config{Mode: "STRICT", ReapInterval: 20 * time.Millisecond}, manager.Deps{
			Assessor: risk.NewAssessor(nil, nil), Policy: &recDecider{fixed: &allow}, Executors: []executors.Executor{newKernelFake()},
			Workspaces: ws, Audit: db, Sessions: db, Placement: p,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(ctx) })
		return m
	}
	gone := replica(placementOf{name: "gone", takes: true})
	if _, _, err := gone.CreateSession(ctx, agent, "orphan", manager.OpenOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := gone.PatchSession(ctx, agent, "orphan", manager.SessionPatch{TimeoutS: ptr(1)}); err != nil {
		t.Fatal(err)
	}
	gone.Close(ctx) // stops its expiry loop, as a dead replica's is
	state := func(m *manager.Manager) string {
		page, err := m.ListSessions(ctx, agent, manager.SessionQuery{})
		if err != nil || len(page.Sessions) != 1 {
			t.Fatalf("list: %+v %v", page, err)
		}
		return page.Sessions[0].State
	}
	alive := replica(placementOf{name: "b", takes: false})
	time.Sleep(1500 * time.Millisecond) // past the TTL, with its replica alive
	if st := state(alive); st != manager.StateActive {
		t.Fatalf("a live replica's session was expired by another: %s", st)
	}
	survivor := replica(placementOf{name: "c", takes: true})
	waitFor(t, func() bool { return state(survivor) == manager.StateExpired }, func() string {
		return "the gone replica's session never expired"
	})
}
