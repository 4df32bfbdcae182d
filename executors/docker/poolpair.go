package docker

import (
	"context"
	"slices"
	"time"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// Pairs for a session's first detached run (E2B's commands are detached
// runs). Under runc a session's detached runs share the loopback of a
// network holder (detached.go), and a container joins a network namespace
// only at its creation: so the first detached run of a session needs a
// holder and a container joined to it, two container starts on its path.
// The pool keeps such pairs ready, per shape: a holder of no session
// (sleep as nobody, no workspace: it only keeps the namespace) and a
// pooled sandbox created in its namespace. A claim makes the holder the
// session's (as if it had been created for it) and hands the sandbox to
// the run like any pooled one. The pair pool is the shape's demand alone:
// it exists once a session's first detached run asked for one, and holds
// Config.Pool.Size pairs at most (a pair is two containers, counted as
// two against Config.Pool.Max).

// pairKey is one shape's pool of pairs.
type pairKey struct {
	idle      []*box // the pooled sandboxes; each box's holder is in holders
	preparing int
	used      time.Time
}

// nobody is the uid and gid a pooled holder sleeps as.
const nobody = "65534:65534"

// claimPair hands the first detached run of session (shape sh, no holder
// yet) a pooled sandbox in the namespace of a pooled holder, which it
// makes the session's holder; nil when none is ready or the session got
// a holder meanwhile (the caller then does as before).
func (p *sandboxPool) claimPair(ctx context.Context, session string, sh shape) *box {
	if p.off != "" || p.e.cfg.OwnKernel || !poolable(sh) || ctx.Err() != nil {
		return nil
	}
	key := poolKeyOf(sh)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	k := p.pairs[key]
	if k == nil {
		k = &pairKey{}
		p.pairs[key] = k
	}
	k.used = time.Now()
	var b *box
	for len(k.idle) > 0 && b == nil {
		b, k.idle = k.idle[0], k.idle[1:]
		p.total -= 2
		if b.exit.exited() || b.holder.exit.exited() {
			p.lost.Add(1)
			p.discardPair(b)
			b = nil
		}
	}
	empty := len(k.idle) == 0
	p.mu.Unlock()
	if b == nil || empty {
		p.kick() // else at the run's end (attach), as for a sandbox
	}
	if b == nil {
		p.misses.Add(1)
		return nil
	}
	if !p.e.adoptHolder(session, b.holder) {
		p.discardPair(b)
		return nil
	}
	h := b.holder
	b.holder = nil // the session's now: released with it, not with the run
	want := sh
	want.netns = h.id
	if err := p.attach(b, want); err != nil {
		p.e.log.Warn("pooled sandbox: attach", "container", shortID(b.id), "err", err.Error())
		p.e.discard(b)
		return nil
	}
	p.claims.Add(1)
	return b
}

// discardPair removes a pair's sandbox and holder.
func (p *sandboxPool) discardPair(b *box) {
	if b.holder != nil {
		p.e.discard(b.holder)
	}
	p.e.discard(b)
}

// adoptHolder makes h session's network holder unless the session has a
// live one already.
func (e *Executor) adoptHolder(session string, h *box) bool {
	d := e.detached
	d.starting.Lock()
	defer d.starting.Unlock()
	if d.netns(session) != "" {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	if old := d.holders[session]; old != nil {
		e.discard(old) // it had exited
	}
	d.holders[session] = h
	return true
}

// nextPair picks a shape whose pair pool lacks one, reserving it. Call
// with p.mu held.
func (p *sandboxPool) nextPair() (shape, bool) {
	if p.closed || p.total+2 > p.e.cfg.Pool.Max {
		return shape{}, false
	}
	for s, k := range p.pairs {
		if len(k.idle)+k.preparing < p.e.cfg.Pool.Size {
			k.preparing++
			p.total += 2
			return s, true
		}
	}
	return shape{}, false
}

// preparePair starts a holder and a pooled sandbox in its namespace.
func (p *sandboxPool) preparePair(key shape) (*box, error) {
	hs := key
	hs.limits.MemoryMB, hs.limits.MaxProcs = holderMemoryMB, holderProcs
	labels := p.e.labels("", "")
	delete(labels, labelWarm)
	labels[labelPool], labels[labelNetHolder] = "true", "true"
	h, err := p.e.launch(p.e.life, hs, labels, func(o *client.ContainerCreateOptions) {
		o.Config.Entrypoint = []string{"sleep", "infinity"}
		o.Config.Cmd = nil
		o.Config.StdinOnce = false
		o.Config.User = nobody
		o.HostConfig.Mounts = slices.DeleteFunc(o.HostConfig.Mounts, func(m mount.Mount) bool {
			return m.Target == workspaceMount || m.Target == key.layout.Root
		})
	})
	if err != nil {
		return nil, err
	}
	rk := key
	rk.netns = h.id
	b, err := p.prepare(rk)
	if err != nil {
		p.e.discard(h)
		return nil, err
	}
	b.holder = h
	return b, nil
}

// fillPair adds a prepared pair to key's pool, or disposes of it. Call
// with p.mu held.
func (p *sandboxPool) fillPair(key shape, b *box, err error) {
	k := p.pairs[key]
	if k != nil {
		k.preparing--
	}
	switch {
	case err != nil:
		p.total -= 2
	case k == nil || p.closed:
		p.total -= 2
		p.discardPair(b)
	default:
		k.idle = append(k.idle, b)
	}
}
