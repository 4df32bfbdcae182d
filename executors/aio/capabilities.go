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
// of those obligations. Stateful runs (kernels) likewise need sandboxd.
//
// Network through the egress proxy holds in none mode: the container
// keeps NetworkMode none and sandboxd relays 127.0.0.1:3128 to the
// gateway's socket in the instance's egress directory (egress.go). In
// bridge mode the container has Docker's network, which is not a grant
// through the proxy: such runs are refused.
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
		NetworkGrant:        sandboxd,
		MemoryLimit:         sandboxd,
		ProcessLimit:        sandboxd,
		KillDetached:        sandboxd,
		FilesystemIsolation: true,
		// sandboxd holds a kernel per session (cmd/sandboxd/kernel.go);
		// the image's own Jupyter service enforces no obligation.
		Kernels:         sandboxd,
		RequiresSession: true,
		// An instance serves its session for the session's life: what a
		// command starts or writes to /tmp is there for the next.
		SessionSandbox: true,
		RootFS:         rootFS,
		Isolation:      isolation,
	}
}

// rootFS is "rootfs:<root>" for an image built on a runtime root (its
// sandgate.rootfs label: the subprocess and docker executors name the
// same root the same way), else "image:<ref>@<id>", or "image:<ref>"
// before the backend's first successful probe.
func (e *Executor) rootFS() string {
	var seen seenImage
	if b, ok := e.be.(interface{ seenImage() seenImage }); ok {
		seen = b.seenImage()
	}
	switch {
	case seen.rootFS != "":
		return "rootfs:" + seen.rootFS
	case seen.id != "":
		return "image:" + e.cfg.Image + "@" + seen.id
	}
	return "image:" + e.cfg.Image
}

// labelRootFS is the image label naming the runtime root the image is
// built on (scripts/images.sh).
const labelRootFS = "sandgate.rootfs"

// seenImage is what a probe learnt of the image.
type seenImage struct {
	id     string
	rootFS string
}

// imageID holds what the last successful probe saw of the image.
type imageID struct{ v atomic.Pointer[seenImage] }

func (i *imageID) set(s seenImage) { i.v.Store(&s) }

func (i *imageID) get() seenImage {
	if p := i.v.Load(); p != nil {
		return *p
	}
	return seenImage{}
}

func (b *localBackend) seenImage() seenImage { return b.image.get() }
