package docker

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/executors"
)

// Capabilities implements executors.Executor. Every run gets a fresh
// container with NetworkMode none, memory and pids cgroup limits, and is
// killed as a whole (the container), so every obligation holds. A
// session's kernel (stateful runs) is a container of the same kind. RootFS
// names the configured images as Available last saw them (see
// imageIdentity); before the engine answered once it names the
// references alone.
//
// Network through the egress proxy (network_grant) holds under runc
// always: the container still has NetworkMode none, and its socat
// reaches the proxy through a Unix socket bind-mounted from the host
// (egress.go). Under a runtime with its own kernel (gVisor) a sandbox
// can connect to a host socket only when the engine registers the
// runtime with runsc's --host-uds=open (or all); without it the grant is
// false, and such runs are refused rather than run without their proxy.
func (e *Executor) Capabilities() executors.Capabilities {
	isolation := "container"
	if e.cfg.Runtime != "" {
		isolation += " (" + e.cfg.Runtime + ")"
		if pl := e.platform.get(); pl != "" {
			isolation = "container (" + e.cfg.Runtime + ", platform " + pl + ")"
		}
	}
	return executors.Capabilities{
		NetworkIsolation:    true,
		NetworkGrant:        !e.cfg.OwnKernel || e.hostUDS.Load(),
		MemoryLimit:         true,
		ProcessLimit:        true,
		KillDetached:        true,
		FilesystemIsolation: true,
		Kernels:             true,             // kernel.go
		SessionSandbox:      true,             // session.go
		Snapshot:            e.snapshotMode(), // checkpoint.go
		RootFS:              imageIdentity(e.cfg.Images, e.imageIDs.get()),
		Isolation:           isolation,
	}
}

// labelRootFS is the image label naming the runtime root an image is built
// on (scripts/images.sh): the same name the subprocess executor reports
// for that root, so that a policy can compare executors' roots.
const labelRootFS = "sandgate.rootfs"

// seenImage is what a probe learnt of one image.
type seenImage struct {
	id     string // content id
	rootFS string // its labelRootFS, if any
}

// rootIdentity is "rootfs:<root>" for an image built on a runtime root (the
// subprocess executor names the same root the same way), else
// "image:<ref>@<id>", or "image:<ref>" before a probe saw it.
func rootIdentity(ref string, seen seenImage) string {
	switch {
	case seen.rootFS != "":
		return "rootfs:" + seen.rootFS
	case seen.id != "":
		return "image:" + ref + "@" + seen.id
	}
	return "image:" + ref
}

// imageIdentity is the rootIdentity of each distinct image, sorted and
// comma-separated (all languages share one image by default).
func imageIdentity(images map[string]string, seen map[string]seenImage) string {
	var out []string
	for _, ref := range images {
		if id := rootIdentity(ref, seen[ref]); !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// imageIDs remembers what the last successful probe saw of each image, so
// that Capabilities, which must not call the engine, can name them.
type imageIDs struct {
	mu   sync.Mutex
	seen map[string]seenImage // reference → what the probe saw
}

func (s *imageIDs) set(ref string, seen seenImage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]seenImage{}
	}
	s.seen[ref] = seen
}

func (s *imageIDs) get() map[string]seenImage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.seen)
}
