package manager_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// memoryPauser is the kernel fake that keeps a kernel's memory over a
// pause, as the gvisor executor does with runsc checkpoint.
type memoryPauser struct {
	*kernelFake
	mu      sync.Mutex
	paused  map[string]bool
	resumed []string
}

func (p *memoryPauser) PauseSession(ctx context.Context, id string) (executors.Paused, error) {
	held := p.live(id)
	_ = p.ReleaseSession(ctx, id)
	p.mu.Lock()
	p.paused[id] = held
	p.mu.Unlock()
	return executors.Paused{Memory: held, Bytes: 42}, nil
}

func (p *memoryPauser) ResumeSession(_ context.Context, id string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := p.paused[id]
	if held {
		p.kernel(id)
	}
	delete(p.paused, id)
	p.resumed = append(p.resumed, id)
	return held, nil
}

func (p *memoryPauser) DropPaused(_ context.Context, id string) {
	p.mu.Lock()
	delete(p.paused, id)
	p.mu.Unlock()
}

func (k *kernelFake) kernel(id string) {
	k.mu.Lock()
	k.kernels[id] = true
	k.mu.Unlock()
}

// TestPauseReleasesAndRestartsKernel: a pause on an executor that keeps
// no memory frees the session's kernel; the next stateful run resumes the
// session by itself and says kernel_restarted, once; the lifecycle
// events and audit say what happened.
func TestPauseReleasesAndRestartsKernel(t *testing.T) {
	ctx := context.Background()
	g := startSessions(t, t.TempDir())
	if _, err := g.run(t, "s1", true); err != nil {
		t.Fatal(err)
	}
	info, err := g.m.PauseSession(ctx, agent, "s1")
	if err != nil || info.State != manager.StatePaused {
		t.Fatalf("pause: %+v %v", info, err)
	}
	if g.kernel.live("t1~s1") {
		t.Fatal("the kernel outlived the pause")
	}
	if info.Moved != nil && !slices.Contains(info.Moved.Lost, manager.HeldKernel) {
		t.Fatalf("lost: %+v", info.Moved)
	}
	again, err := g.m.PauseSession(ctx, agent, "s1")
	if err != nil || again.State != manager.StatePaused {
		t.Fatalf("second pause: %+v %v", again, err)
	}
	res, err := g.run(t, "s1", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Result.Cell == nil || !res.Result.Cell.KernelRestarted {
		t.Fatalf("first cell after pause: %+v", res.Result.Cell)
	}
	if s, _ := g.m.Session(ctx, agent, "s1"); s.State == manager.StatePaused {
		t.Fatalf("still paused after a run: %+v", s)
	}
	if res, _ := g.run(t, "s1", true); res.Result.Cell.KernelRestarted {
		t.Fatal("kernel_restarted said twice")
	}
	waitFor(t, func() bool {
		ev := g.events.types()
		return slices.Contains(ev, "session.paused") && slices.Contains(ev, "session.resumed")
	}, func() string { return "events " + toJSON(t, g.events.types()) })
}

// TestPauseKeepsMemory: on an executor that keeps memory, resume (here
// automatic, by a run) restores it and no restart is reported.
func TestPauseKeepsMemory(t *testing.T) {
	ctx := context.Background()
	k := newKernelFake()
	p := &memoryPauser{kernelFake: k, paused: map[string]bool{}}
	g := startSessionsWith(t, t.TempDir(), k, p)
	if _, err := g.run(t, "s1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := g.m.PauseSession(ctx, agent, "s1"); err != nil {
		t.Fatal(err)
	}
	res, err := g.run(t, "s1", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Result.Cell.KernelRestarted || len(p.resumed) != 1 {
		t.Fatalf("after resume: restarted %v, resumed %v", res.Result.Cell.KernelRestarted, p.resumed)
	}
	if info, err := g.m.ResumeSession(ctx, agent, "s1"); err != nil || info.State == manager.StatePaused {
		t.Fatalf("resume of an active session: %+v %v", info, err)
	}
}

// TestPauseBadInput: unknown and other tenants' sessions are not_found.
func TestPauseBadInput(t *testing.T) {
	ctx := context.Background()
	g := startSessions(t, t.TempDir())
	for _, id := range []string{"nosuch", "t2~theirs"} {
		for name, f := range map[string]func(context.Context, manager.Principal, string) (manager.SessionInfo, error){
			"pause": g.m.PauseSession, "resume": g.m.ResumeSession} {
			if _, err := f(ctx, agent, id); !codeIs(err, errcode.NotFound) {
				t.Errorf("%s %s: %v, want not_found", name, id, err)
			}
		}
	}
}

func codeIs(err error, c errcode.Code) bool {
	got, _, _ := errcode.Of(err)
	return got == c
}

// startSessionsWith is startSessions with exec as the executor (k its
// kernel fake).
func startSessionsWith(t *testing.T, dir string, k *kernelFake, exec executors.Executor, mutate ...func(*manager.Config)) *sessionGateway {
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
	g := &sessionGateway{kernel: k, events: &eventSink{}}
	allow := policy.Decision{Action: policy.ActionAllow, Executor: string(executors.KindDocker)}
	cfg := manager.Config{Mode: "STRICT", ReapInterval: 20 * time.Millisecond}
	for _, m := range mutate {
		m(&cfg)
	}
	g.m, err = manager.New(cfg, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: &recDecider{fixed: &allow}, Executors: []executors.Executor{exec},
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

// TestPauseBusy: a session with a run in flight is not paused (409
// conflict); once the run ends it is.
func TestPauseBusy(t *testing.T) {
	ctx := context.Background()
	k := newKernelFake()
	started, release := make(chan struct{}), make(chan struct{})
	k.Fake.ExecuteFunc = func(ctx context.Context, _ executors.Spec) (executors.Result, error) {
		close(started)
		<-release
		return executors.Result{Stdout: "ok\n"}, nil
	}
	g := startSessionsWith(t, t.TempDir(), k, k)
	done := make(chan error, 1)
	go func() { _, err := g.run(t, "s1", false); done <- err }()
	<-started
	if _, err := g.m.PauseSession(ctx, agent, "s1"); !codeIs(err, errcode.Conflict) {
		t.Fatalf("pause with a run in flight: %v, want conflict", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if info, err := g.m.PauseSession(ctx, agent, "s1"); err != nil || info.State != manager.StatePaused {
		t.Fatalf("pause after the run: %+v %v", info, err)
	}
}

// TestPausedKernelSurvivesRestart: a paused session's kept kernel is its
// checkpoint, not a process, so a restart (kill -9: nothing released)
// does not mark it lost; resumed by its next run it is restored with no
// restart reported. When no executor can restore it (the checkpoint is
// gone), the run says kernel_restarted.
func TestPausedKernelSurvivesRestart(t *testing.T) {
	for _, c := range []struct {
		name      string
		kept      bool // the new process finds the checkpoint
		restarted bool
	}{{"checkpoint kept", true, false}, {"checkpoint gone", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			k := newKernelFake()
			g := startSessionsWith(t, dir, k, &memoryPauser{kernelFake: k, paused: map[string]bool{}})
			if _, err := g.run(t, "s1", true); err != nil {
				t.Fatal(err)
			}
			if _, err := g.m.PauseSession(context.Background(), agent, "s1"); err != nil {
				t.Fatal(err)
			}
			k2 := newKernelFake()
			p2 := &memoryPauser{kernelFake: k2, paused: map[string]bool{"t1~s1": c.kept}}
			g2 := startSessionsWith(t, dir, k2, p2)
			res, err := g2.run(t, "s1", true)
			if err != nil {
				t.Fatal(err)
			}
			if res.Result.Cell.KernelRestarted != c.restarted || len(p2.resumed) != 1 {
				t.Fatalf("kernel_restarted %v (want %v), resumed %v", res.Result.Cell.KernelRestarted, c.restarted, p2.resumed)
			}
		})
	}
}

// TestIdlePause: a session with no request for PauseIdleAfter is paused
// by the reaper (its kernel freed, audited as the idle pauser), and its
// next request resumes it; a session in use is not paused.
func TestIdlePause(t *testing.T) {
	ctx := context.Background()
	k := newKernelFake()
	p := &memoryPauser{kernelFake: k, paused: map[string]bool{}}
	g := startSessionsWith(t, t.TempDir(), k, p, func(c *manager.Config) { c.PauseIdleAfter = 300 * time.Millisecond })
	if _, err := g.run(t, "s1", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		info, err := g.m.Session(ctx, agent, "s1")
		return err == nil && info.State == manager.StatePaused
	}, func() string { info, _ := g.m.Session(ctx, agent, "s1"); return "state " + info.State })
	if k.live("t1~s1") {
		t.Fatal("an idle-paused session kept its kernel process")
	}
	res, err := g.run(t, "s1", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Result.Cell.KernelRestarted || len(p.resumed) != 1 {
		t.Fatalf("after the idle pause: restarted %v, resumed %v", res.Result.Cell.KernelRestarted, p.resumed)
	}
	if info, _ := g.m.Session(ctx, agent, "s1"); info.State == manager.StatePaused {
		t.Fatal("still paused right after a run")
	}
	if !slices.Contains(g.events.types(), "session.paused") {
		t.Fatalf("events %v", g.events.types())
	}
}
