package aio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
)

// fakeBackend stands in for the engine in the state machine's tests.
type fakeBackend struct {
	mu        sync.Mutex
	live      map[string]bool // slots with a "container"
	highWater int
	creates   int
	binds     int
	destroys  int
	delay     time.Duration
	failNext  error
	adoptable []adoptable
	// failDestroys makes the next destroys fail (an engine restarting).
	failDestroys int
	// failLeaves makes failNext's create leave its container behind.
	failLeaves bool
}

func newFakeBackend() *fakeBackend { return &fakeBackend{live: map[string]bool{}} }

func (f *fakeBackend) available(context.Context) error { return nil }

func (f *fakeBackend) create(ctx context.Context, slot, _ string) (*handle, error) {
	f.mu.Lock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		if f.failLeaves {
			// The container was made but could not be started nor
			// removed: its handle comes back with the error.
			f.live[slot] = true
			f.mu.Unlock()
			return &handle{slot: slot, containerID: "c-" + slot}, err
		}
		f.mu.Unlock()
		return nil, err
	}
	f.creates++
	f.live[slot] = true
	f.highWater = max(f.highWater, len(f.live))
	delay := f.delay
	f.mu.Unlock()
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		f.mu.Lock()
		delete(f.live, slot) // a failed create leaves nothing, as the real one
		f.mu.Unlock()
		return nil, ctx.Err()
	}
	return &handle{slot: slot, containerID: "c-" + slot}, nil
}

func (f *fakeBackend) bind(context.Context, *handle, binding) (*Client, error) {
	f.mu.Lock()
	f.binds++
	f.mu.Unlock()
	return NewUnixClient("/nonexistent/sandboxd.sock", "k"), nil
}

func (f *fakeBackend) destroy(_ context.Context, h *handle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failDestroys > 0 {
		f.failDestroys--
		return errors.New("engine unreachable")
	}
	f.destroys++
	delete(f.live, h.slot)
	return nil
}

func (f *fakeBackend) adopt(context.Context) ([]adoptable, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.adoptable {
		f.live[a.h.slot] = true
	}
	return f.adoptable, nil
}

// gone: a "container" killed from outside is one no longer live that
// the pool did not destroy.
func (f *fakeBackend) gone(_ context.Context, h *handle) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.live[h.slot]
}

// kill removes slot's "container" behind the pool's back.
func (f *fakeBackend) kill(slot string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, slot)
}

func (f *fakeBackend) containerName(s string) string { return "fake-" + s }
func (f *fakeBackend) close(bool)                    {}

func (f *fakeBackend) counts() (creates, binds, destroys, live, high int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates, f.binds, f.destroys, len(f.live), f.highWater
}

func newFakePool(t *testing.T, be *fakeBackend, mutate ...func(*PoolConfig)) *pool {
	t.Helper()
	cfg := PoolConfig{MaxInstances: 4, IdleTimeout: time.Hour, AcquireTimeout: time.Second, StateDir: "/x",
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))}
	for _, m := range mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p := newPool(cfg.withDefaults(), be)
	p.start(context.Background())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.close(ctx, false); err != nil {
			t.Errorf("close: %v", err)
		}
		if _, _, _, live, _ := be.counts(); live != 0 {
			t.Errorf("%d fake containers left after close", live)
		}
	})
	return p
}

func bindingFor(s string) binding {
	return binding{session: s, ws: Workspace{Dir: "/ws/" + s, UID: 1, GID: 1}}
}

// TestPoolConcurrentAcquire: 100 concurrent acquires for one session
// create one container; they share the BUSY instance.
func TestPoolConcurrentAcquire(t *testing.T) {
	be := newFakeBackend()
	be.delay = 50 * time.Millisecond
	p := newFakePool(t, be)
	var wg sync.WaitGroup
	leases := make(chan *lease, 100)
	for range 100 {
		wg.Go(func() {
			l, err := p.acquire(context.Background(), bindingFor("s"))
			if err != nil {
				t.Error(err)
				return
			}
			leases <- l
		})
	}
	wg.Wait()
	close(leases)
	var first *instance
	for l := range leases {
		if first == nil {
			first = l.in
		}
		if l.in != first {
			t.Fatal("two instances for one session")
		}
		l.release(false)
	}
	if creates, binds, _, _, _ := be.counts(); creates != 1 || binds != 1 {
		t.Errorf("creates %d binds %d, want 1 and 1", creates, binds)
	}
	if inf, _ := p.info("s"); inf.State != "idle" || inf.Uses != 100 || inf.Running != 0 {
		t.Errorf("info %+v", inf)
	}
}

// TestPoolExhausted: every slot busy → pool_exhausted after the wait, a
// coded error distinct from executor_unavailable.
func TestPoolExhausted(t *testing.T) {
	be := newFakeBackend()
	p := newFakePool(t, be, func(c *PoolConfig) { c.MaxInstances, c.AcquireTimeout = 2, 150*time.Millisecond })
	l1, _ := p.acquire(context.Background(), bindingFor("a"))
	l2, _ := p.acquire(context.Background(), bindingFor("b"))
	start := time.Now()
	_, err := p.acquire(context.Background(), bindingFor("c"))
	if !errors.Is(err, ErrPoolExhausted) || errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("err %v, want ErrPoolExhausted only", err)
	}
	if code, status, _ := errcode.Of(err); code != errcode.PoolExhausted || status != http.StatusServiceUnavailable {
		t.Errorf("errcode %s %d", code, status)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("waited %v", d)
	}
	// The caller's own cancellation is reported as such, not as exhaustion.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.acquire(ctx, bindingFor("c")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled wait: %v", err)
	}
	// A release while waiting lets the waiter in (evicting the idle one).
	go func() { time.Sleep(50 * time.Millisecond); l1.release(false) }()
	l3, err := p.acquire(context.Background(), bindingFor("c"))
	if err != nil {
		t.Fatalf("acquire after a release: %v", err)
	}
	if _, ok := p.info("a"); ok {
		t.Errorf("a's idle instance was not evicted for c")
	}
	l2.release(false)
	l3.release(false)
	if _, _, _, _, high := be.counts(); high > 2 {
		t.Errorf("%d containers at once with max_instances 2", high)
	}
}

// TestPoolEvictsLRU: at max_instances the least recently used idle
// instance goes first.
func TestPoolEvictsLRU(t *testing.T) {
	be := newFakeBackend()
	p := newFakePool(t, be, func(c *PoolConfig) { c.MaxInstances = 3 })
	for _, s := range []string{"a", "b", "c", "a"} { // b is now the least recently used
		l, err := p.acquire(context.Background(), bindingFor(s))
		if err != nil {
			t.Fatal(err)
		}
		l.release(false)
		time.Sleep(2 * time.Millisecond)
	}
	l, err := p.acquire(context.Background(), bindingFor("d"))
	if err != nil {
		t.Fatal(err)
	}
	l.release(false)
	for s, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := p.info(s); ok != want {
			t.Errorf("session %s has an instance: %v, want %v", s, ok, want)
		}
	}
}

func TestPoolIdleTimeoutAndMaxUses(t *testing.T) {
	be := newFakeBackend()
	p := newFakePool(t, be, func(c *PoolConfig) { c.IdleTimeout, c.MaxUses = 200*time.Millisecond, 2 })
	var ids []string
	for range 3 {
		l, err := p.acquire(context.Background(), bindingFor("s"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, l.in.slot)
		l.release(false)
	}
	if ids[0] != ids[1] || ids[1] == ids[2] {
		t.Errorf("slots %v: want the instance recycled after 2 uses", ids)
	}
	waitFor(t, 3*time.Second, "the idle instance to go", func() bool { _, ok := p.info("s"); return !ok })
	waitFor(t, 3*time.Second, "its container to go", func() bool { _, _, _, live, _ := be.counts(); return live == 0 })
}

func TestPoolFailureAndBroken(t *testing.T) {
	be := newFakeBackend()
	be.delay = 30 * time.Millisecond
	p := newFakePool(t, be)
	be.failNext = errors.New("engine said no")
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Go(func() {
			l, err := p.acquire(context.Background(), bindingFor("s"))
			if err == nil {
				l.release(false)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Errorf("no acquire saw the failure")
	}
	// The next acquire starts over.
	l, err := p.acquire(context.Background(), bindingFor("s"))
	if err != nil {
		t.Fatal(err)
	}
	slot := l.in.slot
	l.release(true) // outcome unknown: recycled
	l, err = p.acquire(context.Background(), bindingFor("s"))
	if err != nil {
		t.Fatal(err)
	}
	if l.in.slot == slot {
		t.Errorf("a broken instance was handed out again")
	}
	// ReleaseSession while busy: destroyed when the run ends.
	p.releaseSession("s")
	if inf, _ := p.info("s"); inf.State != "busy" {
		t.Errorf("released while busy: %+v", inf)
	}
	l.release(false)
	if _, ok := p.info("s"); ok {
		t.Errorf("instance of a released session still listed")
	}
}

func TestPoolStartsAheadAndAdopts(t *testing.T) {
	be := newFakeBackend()
	be.adoptable = []adoptable{
		{h: &handle{slot: "old1"}, session: "kept", ws: bindingFor("kept").ws, client: NewUnixClient("/x", "k")},
		{h: &handle{slot: "old2"}},
	}
	p := newFakePool(t, be, func(c *PoolConfig) { c.MinInstances, c.MaxInstances = 2, 4 })
	waitFor(t, 2*time.Second, "two unbound instances", func() bool { st := p.stats(); return st["unbound"] == 2 && st["acquiring"] == 0 })
	if creates, _, _, _, _ := be.counts(); creates != 1 {
		t.Errorf("creates %d: the adopted unbound instance should count toward min_instances", creates)
	}
	inf, ok := p.info("kept")
	if !ok || !inf.Adopted {
		t.Fatalf("adopted session: %+v %v", inf, ok)
	}
	l, err := p.acquire(context.Background(), bindingFor("kept"))
	if err != nil || l.in.slot != "old1" {
		t.Fatalf("acquire of the adopted session: %v", err)
	}
	l.release(false)
	l, err = p.acquire(context.Background(), bindingFor("new"))
	if err != nil {
		t.Fatal(err)
	}
	if _, binds, _, _, _ := be.counts(); binds != 1 {
		t.Errorf("binds %d: a new session should bind an instance started ahead", binds)
	}
	l.release(false)
	waitFor(t, 2*time.Second, "the unbound instances to be replenished", func() bool { return p.stats()["unbound"] == 2 })
}

// TestPoolNeverExceedsMax hammers the state machine with many sessions.
func TestPoolNeverExceedsMax(t *testing.T) {
	be := newFakeBackend()
	be.delay = 5 * time.Millisecond
	p := newFakePool(t, be, func(c *PoolConfig) { c.MaxInstances, c.MinInstances, c.AcquireTimeout = 5, 1, 5*time.Second })
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			l, err := p.acquire(context.Background(), bindingFor(fmt.Sprint("s", i%40)))
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
			l.release(i%17 == 0)
		})
	}
	wg.Wait()
	if _, _, _, _, high := be.counts(); high > 5 {
		t.Errorf("%d containers at once, max_instances 5", high)
	}
}

// TestPoolReapsGoneInstances: an idle instance whose container died
// behind the pool's back (an engine restart, docker rm) is removed by the
// pool's loop, not left until its idle timeout, and the session's next
// acquire gets a new one (issue 21's soak found exited aio containers
// after an engine restart).
func TestPoolReapsGoneInstances(t *testing.T) {
	be := newFakeBackend()
	p := newFakePool(t, be)
	l, err := p.acquire(context.Background(), bindingFor("s"))
	if err != nil {
		t.Fatal(err)
	}
	slot := l.in.slot
	l.release(false)
	be.kill(slot)
	deadline := time.Now().Add(3 * goneCheckEvery)
	for {
		if _, _, destroys, _, _ := be.counts(); destroys == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the instance whose container is gone was not removed in %s", 3*goneCheckEvery)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := p.info("s"); ok {
		t.Error("the session still has the dead instance")
	}
	l, err = p.acquire(context.Background(), bindingFor("s"))
	if err != nil {
		t.Fatal(err)
	}
	if l.in.slot == slot {
		t.Error("the session got its dead instance back")
	}
	l.release(false)
	if creates, _, _, _, _ := be.counts(); creates != 2 {
		t.Errorf("creates %d, want 2", creates)
	}
}

// TestPoolRetriesFailedDestroy: a removal the engine refuses (restarting)
// is retried until it succeeds, so the container is not left behind.
func TestPoolRetriesFailedDestroy(t *testing.T) {
	every := destroyRetryEvery
	destroyRetryEvery = 20 * time.Millisecond
	t.Cleanup(func() { destroyRetryEvery = every })
	be := newFakeBackend()
	p := newFakePool(t, be)
	l, err := p.acquire(context.Background(), bindingFor("s"))
	if err != nil {
		t.Fatal(err)
	}
	l.release(false)
	be.mu.Lock()
	be.failDestroys = 3
	be.mu.Unlock()
	p.releaseSession("s")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, destroys, live, _ := be.counts(); destroys == 1 && live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the refused removal was not retried")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPoolRemovesWhatAFailedCreateLeft: a create that failed after making
// its container (the engine stopping between create and start) hands the
// container back, and the pool removes it, retrying while the engine
// refuses.
func TestPoolRemovesWhatAFailedCreateLeft(t *testing.T) {
	every := destroyRetryEvery
	destroyRetryEvery = 20 * time.Millisecond
	t.Cleanup(func() { destroyRetryEvery = every })
	be := newFakeBackend()
	be.failNext, be.failLeaves, be.failDestroys = errors.New("start container: engine stopping"), true, 2
	p := newFakePool(t, be)
	if _, err := p.acquire(context.Background(), bindingFor("s")); err == nil {
		t.Fatal("acquire succeeded although create failed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, destroys, live, _ := be.counts(); destroys == 1 && live == 0 {
			break
		}
		if time.Now().After(deadline) {
			_, _, destroys, live, _ := be.counts()
			t.Fatalf("the failed create's container is left: destroys %d, live %d", destroys, live)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPoolAheadOnDemand: with AheadOnDemand and no MinInstances, an idle
// pool starts nothing; once a session took an instance, one is started
// ahead and the next session binds it instead of creating one; after
// IdleTimeout without a new session it is reaped and none is started.
func TestPoolAheadOnDemand(t *testing.T) {
	be := newFakeBackend()
	p := newFakePool(t, be, func(c *PoolConfig) { c.AheadOnDemand, c.IdleTimeout = true, 400*time.Millisecond })
	time.Sleep(150 * time.Millisecond)
	if creates, _, _, _, _ := be.counts(); creates != 0 {
		t.Fatalf("creates %d before any session: nothing is started ahead without demand", creates)
	}
	l, err := p.acquire(context.Background(), bindingFor("first"))
	if err != nil {
		t.Fatal(err)
	}
	l.release(false)
	waitFor(t, 2*time.Second, "one instance started ahead", func() bool {
		st := p.stats()
		return st["unbound"] == 1 && st["acquiring"] == 0
	})
	var ahead string
	p.mu.Lock()
	for slot := range p.unbound {
		ahead = slot
	}
	p.mu.Unlock()
	l, err = p.acquire(context.Background(), bindingFor("second"))
	if err != nil {
		t.Fatal(err)
	}
	if l.in.slot != ahead {
		t.Errorf("the second session got slot %s, not the one started ahead (%s)", l.in.slot, ahead)
	}
	l.release(false)
	waitFor(t, 3*time.Second, "the instances reaped once sessions stopped arriving", func() bool {
		st := p.stats()
		return st["unbound"] == 0 && st["idle"] == 0 && st["acquiring"] == 0
	})
}

// TestPoolRefillAfterTheClaimingRun: the instance started ahead that a
// claim took is replaced once the claiming run ends, not while it runs,
// so the container start does not compete with the session's first run
// for the CPU.
func TestPoolRefillAfterTheClaimingRun(t *testing.T) {
	be := newFakeBackend()
	p := newFakePool(t, be, func(c *PoolConfig) { c.MinInstances, c.IdleTimeout = 1, time.Hour })
	waitFor(t, 2*time.Second, "one instance started ahead", func() bool {
		st := p.stats()
		return st["unbound"] == 1 && st["acquiring"] == 0
	})
	l, err := p.acquire(context.Background(), bindingFor("first"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the loop's tick is 5 s here
	if creates, _, _, _, _ := be.counts(); creates != 1 {
		t.Fatalf("creates %d while the claiming run was running, want 1", creates)
	}
	l.release(false)
	waitFor(t, 2*time.Second, "a new instance started ahead after the run", func() bool {
		st := p.stats()
		creates, _, _, _, _ := be.counts()
		return creates == 2 && st["unbound"] == 1 && st["acquiring"] == 0
	})
}
