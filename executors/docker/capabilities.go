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
// killed as a whole (the container), so every obligation holds. RootFS
// names the configured images with the ids Available last saw ("image:
// <ref>@<id>"); before the engine answered once it names the references
// alone.
func (e *Executor) Capabilities() executors.Capabilities {
	isolation := "container"
	if e.cfg.Runtime != "" {
		isolation += " (" + e.cfg.Runtime + ")"
	}
	return executors.Capabilities{
		NetworkIsolation:    true,
		MemoryLimit:         true,
		ProcessLimit:        true,
		KillDetached:        true,
		FilesystemIsolation: true,
		RootFS:              imageIdentity(e.cfg.Images, e.imageIDs.get()),
		Isolation:           isolation,
	}
}

// imageIdentity is "image:<ref>@<id>" for each distinct image, sorted and
// comma-separated (all languages share one image by default).
func imageIdentity(images map[string]string, ids map[string]string) string {
	refs := make([]string, 0, len(images))
	for _, ref := range images {
		if !slices.Contains(refs, ref) {
			refs = append(refs, ref)
		}
	}
	slices.Sort(refs)
	out := make([]string, len(refs))
	for i, ref := range refs {
		out[i] = "image:" + ref
		if id := ids[ref]; id != "" {
			out[i] += "@" + id
		}
	}
	return strings.Join(out, ",")
}

// imageIDs remembers the image ids the last successful probe saw, so
// that Capabilities, which must not call the engine, can name them.
type imageIDs struct {
	mu  sync.Mutex
	ids map[string]string // reference → image id
}

func (s *imageIDs) set(ref, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]string{}
	}
	s.ids[ref] = id
}

func (s *imageIDs) get() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.ids)
}
