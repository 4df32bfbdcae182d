package docker

import (
	"strings"
	"testing"
)

func TestImageIdentity(t *testing.T) {
	tests := []struct {
		name   string
		images map[string]string
		seen   map[string]seenImage
		want   string
	}{
		{name: "one image, not probed yet", images: map[string]string{"python": "rt:1", "bash": "rt:1"},
			want: "image:rt:1"},
		{name: "one image with its id", images: map[string]string{"python": "rt:1", "bash": "rt:1"},
			seen: map[string]seenImage{"rt:1": {id: "sha256:ab"}}, want: "image:rt:1@sha256:ab"},
		{name: "built on a runtime root", images: map[string]string{"python": "rt:1"},
			seen: map[string]seenImage{"rt:1": {id: "sha256:ab", rootFS: "runtime-0123"}}, want: "rootfs:runtime-0123"},
		{name: "two images on one root name it once", images: map[string]string{"python": "rt:1", "bash": "rt:2"},
			seen: map[string]seenImage{"rt:1": {rootFS: "runtime-0123"}, "rt:2": {rootFS: "runtime-0123"}}, want: "rootfs:runtime-0123"},
		{name: "distinct images, sorted", images: map[string]string{"python": "py:2", "bash": "rt:1"},
			seen: map[string]seenImage{"rt:1": {id: "sha256:ab"}}, want: "image:py:2,image:rt:1@sha256:ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := imageIdentity(tt.images, tt.seen); got != tt.want {
				t.Errorf("imageIdentity = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCapabilitiesNameTheImage: after a successful probe the root
// filesystem is the runtime root the image is built on, and every
// obligation is enforceable, network through the egress bridge included.
func TestCapabilitiesNameTheImage(t *testing.T) {
	e := newTestExecutor(t)
	if err := e.Available(t.Context()); err != nil {
		t.Fatalf("Available: %v", err)
	}
	c := e.Capabilities()
	// The runtime image carries the root it is built on (scripts/images.sh).
	if !strings.HasPrefix(c.RootFS, "rootfs:runtime-") {
		t.Errorf("RootFS = %q, want rootfs:runtime-<hash>, the image's %s label", c.RootFS, labelRootFS)
	}
	if !c.NetworkIsolation || !c.MemoryLimit || !c.ProcessLimit || !c.KillDetached || !c.FilesystemIsolation ||
		!c.NetworkGrant || c.RequiresSession {
		t.Errorf("Capabilities = %+v", c)
	}
}
