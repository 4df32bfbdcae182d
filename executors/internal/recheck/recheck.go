// Package recheck keeps a passing check of a container engine's
// configuration (a runtime's registration, an image's presence and id)
// from being repeated on every availability probe.
//
// The manager probes each executor every second while requests arrive,
// and its probe runs beside them. Asked each time, a Docker 20.10 engine
// answers GET /info by executing `runc --version` and `docker-init
// --version` (about 20 ms of CPU) and each image inspect costs it about
// 0.9 ms: on a 2-core machine that landed on the runs themselves (a
// subprocess session's first output, 20.6 ms at p50 with the probe, 13.5
// ms without). What these checks read changes only when an operator
// reconfigures the engine or its images, so a passing check stands for
// Within. It is forgotten at once when the engine stops answering (it may
// come back configured otherwise) or when a run fails as unavailable (an
// engine that lost a runtime or an image refuses the create), and a failing
// check is never kept: what an operator fixes shows at the next probe.
package recheck

import (
	"sync"
	"time"
)

// Within is how long a passing check stands.
const Within = 30 * time.Second

// Passed is when a check last passed. The zero value asks for a check.
// It is safe for concurrent use.
type Passed struct {
	mu  sync.Mutex
	at  time.Time // zero: check again
	gen uint64    // bumped by Forget
}

// Fresh reports whether the check passed less than Within before now.
func (p *Passed) Fresh(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.at.IsZero() && now.Sub(p.at) < Within
}

// Begin is called before a check; its token goes to Pass.
func (p *Passed) Begin() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// Pass records a check, begun with token, that passed at now. A Forget
// since its Begin wins: that check may have read the engine before what
// made a run fail.
func (p *Passed) Pass(token uint64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if token == p.gen {
		p.at = now
	}
}

// Forget makes the next probe check again.
func (p *Passed) Forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	p.at = time.Time{}
}
