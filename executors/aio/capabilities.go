package aio

import (
	"sync/atomic"

	"github.com/sandgate/sandgate/executors"
)

// Capabilities implements executors.Executor. Every instance is a
// container bound to one session (so a run needs a session), with the
// session's workspace at /workspace and the image as its root.
//
// In none mode sandboxd serves the instance: it has no network, applies
// each run's memory and process limits (RLIMIT_AS and a RLIMIT_NPROC
// budget, see cmd/sandboxd) and kills detached processes by their run
// marker. In bridge mode the image's own server runs on Docker's bridge
// and knows none of sandboxd's per-run extensions, so it can enforce none
// of those obligations.
func (e *Executor) Capabilities() executors.Capabilities {
	return capabilitiesFor(e.cfg.Network, e.rootFS())
}

func capabilitiesFor(network, rootFS string) executors.Capabilities {
	sandboxd := network == NetworkNone
	isolation := "container"
	if !sandboxd {
		isolation = "container, bridge network"
	}
	return executors.Capabilities{
		NetworkIsolation:    sandboxd,
		MemoryLimit:         sandboxd,
		ProcessLimit:        sandboxd,
		KillDetached:        sandboxd,
		FilesystemIsolation: true,
		RequiresSession:     true,
		RootFS:              rootFS,
		Isolation:           isolation,
	}
}

// rootFS is "image:<ref>@<id>", with the id the backend's last successful
// probe saw, or the reference alone before that.
func (e *Executor) rootFS() string {
	id := ""
	if b, ok := e.be.(interface{ seenImageID() string }); ok {
		id = b.seenImageID()
	}
	if id == "" {
		return "image:" + e.cfg.Image
	}
	return "image:" + e.cfg.Image + "@" + id
}

// imageID holds the image id the last successful probe saw.
type imageID struct{ v atomic.Pointer[string] }

func (i *imageID) set(id string) { i.v.Store(&id) }

func (i *imageID) get() string {
	if p := i.v.Load(); p != nil {
		return *p
	}
	return ""
}

func (b *localBackend) seenImageID() string { return b.image.get() }
