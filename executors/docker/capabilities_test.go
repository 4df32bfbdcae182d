package docker

import (
	"strings"
	"testing"
)

func TestImageIdentity(t *testing.T) {
	tests := []struct {
		name   string
		images map[string]string
		ids    map[string]string
		want   string
	}{
		{name: "one image, not probed yet", images: map[string]string{"python": "rt:1", "bash": "rt:1"},
			want: "image:rt:1"},
		{name: "one image with its id", images: map[string]string{"python": "rt:1", "bash": "rt:1"},
			ids: map[string]string{"rt:1": "sha256:ab"}, want: "image:rt:1@sha256:ab"},
		{name: "distinct images, sorted", images: map[string]string{"python": "py:2", "bash": "rt:1"},
			ids: map[string]string{"rt:1": "sha256:ab"}, want: "image:py:2,image:rt:1@sha256:ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := imageIdentity(tt.images, tt.ids); got != tt.want {
				t.Errorf("imageIdentity = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCapabilitiesNameTheImage: after a successful probe the root
// filesystem names the runtime image by id, and every obligation is
// enforceable.
func TestCapabilitiesNameTheImage(t *testing.T) {
	e := newTestExecutor(t)
	if err := e.Available(t.Context()); err != nil {
		t.Fatalf("Available: %v", err)
	}
	c := e.Capabilities()
	if !strings.HasPrefix(c.RootFS, "image:"+DefaultImage+"@sha256:") {
		t.Errorf("RootFS = %q, want image:%s@sha256:...", c.RootFS, DefaultImage)
	}
	if !c.NetworkIsolation || !c.MemoryLimit || !c.ProcessLimit || !c.KillDetached || !c.FilesystemIsolation ||
		c.NetworkGrant || c.RequiresSession {
		t.Errorf("Capabilities = %+v", c)
	}
}
