package docker

import (
	"context"
	"time"

	"github.com/moby/moby/client"
)

// labelCreate names one create call: a create whose answer was lost is
// found by it (sweepUnconfirmed).
const labelCreate = labelPrefix + "create"

// A create call whose answer is lost (the engine connection dropped
// mid-call, as when the engine stops while a warm container is being
// prepared) may still have made its container: the engine has it, in
// state created, and this executor has no id for it. Close's sweepOwn
// would remove it, but a gateway runs for months: the fault soak counted
// it as a leak (CI). So each create carries a nonce label, and a failed
// create starts a sweep of that label: it lists again every
// unconfirmedRetry, removing what it finds, until a list succeeds at
// least unconfirmedSettle after the failure (by then the engine has
// either made the container or never will), or Close. Variables so that
// tests can shorten them.
var (
	unconfirmedRetry  = 2 * time.Second
	unconfirmedSettle = 5 * time.Second
)

// sweepUnconfirmed removes, in the background, the container of the
// failed create call labelled nonce, if the engine made one.
func (e *Executor) sweepUnconfirmed(nonce string) {
	settled := time.Now().Add(unconfirmedSettle)
	retry := unconfirmedRetry
	go func() {
		t := time.NewTicker(retry)
		defer t.Stop()
		for {
			select {
			case <-e.life.Done():
				return // Close's sweepOwn removes it
			case <-t.C:
			}
			if e.removeCreated(nonce) && time.Now().After(settled) {
				return
			}
		}
	}()
}

// removeCreated removes the containers labelled nonce; it reports whether
// the engine answered the list. A removal that fails is retried with the
// other leftovers.
func (e *Executor) removeCreated(nonce string) bool {
	ctx, cancel := context.WithTimeout(e.life, e.cfg.PingTimeout)
	defer cancel()
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: e.instanceFilter().Add("label", labelCreate+"="+nonce)})
	if err != nil {
		return false
	}
	for _, c := range list.Items {
		if err := e.removeNow(c.ID); err != nil {
			e.mu.Lock()
			e.leftover[c.ID] = true
			e.mu.Unlock()
			continue
		}
		e.log.Info("removed a container whose creation was not confirmed", "container", shortID(c.ID))
	}
	return true
}
