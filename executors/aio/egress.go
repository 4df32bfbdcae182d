package aio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/ctrfile"
	"github.com/sandgate/sandgate/executors/internal/unixsock"
)

// The egress bridge of an instance (DESIGN.md §9). The container keeps
// NetworkMode none. Each instance's state directory has egress/, bound
// read-only at executors.EgressDir, in which the gateway listens on
// proxy.sock; sandboxd (started with --egress) listens on
// 127.0.0.1:EgressPort inside and relays every connection there, bytes
// only. The gateway decides which run a connection is for:
//
//   - an instance serves one session, whose runs may be concurrent and
//     share the container's loopback, so a connection cannot be told
//     apart by where it comes from. It is served, with that run's Egress
//     (its session, principal, request id, risk), only while exactly one
//     run is active on the instance and that run is granted network;
//     otherwise it is closed. A concurrent run without a grant therefore
//     never gets network through a sibling's grant, and no connection
//     is ever decided or audited as the wrong run's.
//   - when the run ends, its connections are closed (its Egress's
//     context ends) before Execute returns.
const (
	stateEgress = "egress" // the egress directory (container: executors.EgressDir)
)

// egressHub is the backend's bookkeeping of instance bridges.
type egressHub struct {
	mu     sync.Mutex
	slots  map[string]*slotEgress
	system []byte // the image's system CA bundle, once read
	read   bool
}

// slotEgress is one instance's listener and the runs active on it.
type slotEgress struct {
	ln   net.Listener
	runs map[*egressRun]struct{}
}

// egressRun is one active run of an instance.
type egressRun struct {
	ctx    context.Context
	cancel context.CancelFunc
	eg     executors.Egress // nil: the run has no network
	conns  sync.WaitGroup
}

// openEgress makes the instance's socket (a stale one from an earlier
// process is replaced) and accepts on it.
func (b *localBackend) openEgress(h *handle) error {
	dir := filepath.Join(h.dir, stateEgress)
	sock := filepath.Join(dir, executors.EgressSocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("aio: egress socket: %w", err)
	}
	ln, err := unixsock.Listen(dir, executors.EgressSocketName)
	if err != nil {
		return fmt.Errorf("aio: egress socket: %w", err)
	}
	// sandboxd, the session's uid, connects; the state directory (0700,
	// root) keeps every host user but root away from it.
	if err := os.Chmod(sock, 0o666); err != nil {
		ln.Close()
		return fmt.Errorf("aio: egress socket: %w", err)
	}
	b.egress.mu.Lock()
	if b.egress.slots == nil {
		b.egress.slots = map[string]*slotEgress{}
	}
	if old := b.egress.slots[h.slot]; old != nil {
		old.ln.Close()
	}
	se := &slotEgress{ln: ln, runs: map[*egressRun]struct{}{}}
	b.egress.slots[h.slot] = se
	b.egress.mu.Unlock()
	go b.acceptEgress(h.slot, se)
	return nil
}

func (b *localBackend) acceptEgress(slot string, se *slotEgress) {
	for {
		c, err := se.ln.Accept()
		if err != nil {
			return
		}
		b.routeEgress(slot, se, c)
	}
}

// routeEgress hands c to the instance's only active run when that run is
// granted network, and closes it otherwise.
func (b *localBackend) routeEgress(slot string, se *slotEgress, c net.Conn) {
	b.egress.mu.Lock()
	var only *egressRun
	if len(se.runs) == 1 {
		for r := range se.runs {
			only = r
		}
	}
	if only == nil || only.eg == nil || only.ctx.Err() != nil {
		n := len(se.runs)
		b.egress.mu.Unlock()
		c.Close()
		b.log.Info("aio: egress connection refused: no single run granted network on the instance",
			"slot", slot, "active_runs", n)
		return
	}
	only.conns.Add(1)
	b.egress.mu.Unlock()
	go func() {
		defer only.conns.Done()
		only.eg.ServeConn(only.ctx, c)
	}()
}

// beginRun registers a run on the instance (every run, granted or not:
// see the rules above) and returns its end, which closes its connections
// and waits for them.
func (b *localBackend) beginRun(ctx context.Context, slot string, eg executors.Egress) (end func()) {
	r := &egressRun{eg: eg}
	r.ctx, r.cancel = context.WithCancel(ctx)
	b.egress.mu.Lock()
	se := b.egress.slots[slot]
	if se != nil {
		se.runs[r] = struct{}{}
	}
	b.egress.mu.Unlock()
	return func() {
		b.egress.mu.Lock()
		if se != nil {
			delete(se.runs, r)
		}
		b.egress.mu.Unlock()
		r.cancel()
		r.conns.Wait()
	}
}

// hasEgress reports whether the instance has its bridge (an instance
// adopted from a process that made none has not).
func (b *localBackend) hasEgress(slot string) bool {
	b.egress.mu.Lock()
	defer b.egress.mu.Unlock()
	return b.egress.slots[slot] != nil
}

// closeEgress stops the instance's listener (destroy, close).
func (b *localBackend) closeEgress(slot string) {
	b.egress.mu.Lock()
	defer b.egress.mu.Unlock()
	if se := b.egress.slots[slot]; se != nil {
		se.ln.Close()
		delete(b.egress.slots, slot)
	}
}

// closeAllEgress stops every listener.
func (b *localBackend) closeAllEgress() {
	b.egress.mu.Lock()
	defer b.egress.mu.Unlock()
	for slot, se := range b.egress.slots {
		se.ln.Close()
		delete(b.egress.slots, slot)
	}
}

// writeBundle puts the combined CA bundle (the image's system roots plus
// ca) in the instance's egress directory, unless it is there already.
func (b *localBackend) writeBundle(ctx context.Context, h *handle, ca []byte) error {
	b.egress.mu.Lock()
	system, read := b.egress.system, b.egress.read
	b.egress.mu.Unlock()
	if !read {
		var err error
		if system, err = ctrfile.Read(ctx, b.cli, h.containerID, executors.SystemCABundle); err != nil {
			return fmt.Errorf("aio: system CA bundle: %w", err)
		}
		b.egress.mu.Lock()
		b.egress.system, b.egress.read = system, true
		b.egress.mu.Unlock()
	}
	want := executors.EgressBundle(system, ca)
	p := filepath.Join(h.dir, stateEgress, executors.EgressBundleName)
	if have, err := os.ReadFile(p); err == nil && bytes.Equal(have, want) {
		return nil
	}
	tmp := p + ".new"
	if err := os.WriteFile(tmp, want, 0o644); err != nil {
		return fmt.Errorf("aio: egress bundle: %w", err)
	}
	if err := errors.Join(os.Chmod(tmp, 0o644), os.Rename(tmp, p)); err != nil {
		return fmt.Errorf("aio: egress bundle: %w", err)
	}
	return nil
}

// egressBackend is what Execute needs of a backend that bridges egress
// (the local backend in none mode).
type egressBackend interface {
	hasEgress(slot string) bool
	beginRun(ctx context.Context, slot string, eg executors.Egress) (end func())
	writeBundle(ctx context.Context, h *handle, ca []byte) error
}

// startEgress registers the run on its instance and prepares its grant:
// nil without network, else what sandboxd must add to the run.
func (e *Executor) startEgress(ctx context.Context, l *lease, spec executors.Spec) (grant *RunEgress, end func(), err error) {
	eb, ok := e.be.(egressBackend)
	if !ok {
		if spec.Network {
			return nil, nil, executors.CheckEgress(executors.KindAIO, executors.Capabilities{}, spec)
		}
		return nil, func() {}, nil
	}
	if !spec.Network {
		return nil, eb.beginRun(ctx, l.in.h.slot, nil), nil
	}
	if !eb.hasEgress(l.in.h.slot) {
		return nil, nil, fmt.Errorf("aio: %w: the session's instance has no egress bridge (adopted from an older gateway); release the session",
			executors.ErrCapabilityMissing)
	}
	grant = &RunEgress{}
	if ca := spec.Egress.CACertPEM(); ca != nil {
		if err := eb.writeBundle(ctx, l.in.h, ca); err != nil {
			return nil, nil, err
		}
		grant.CA = true
	}
	return grant, eb.beginRun(ctx, l.in.h.slot, spec.Egress), nil
}
