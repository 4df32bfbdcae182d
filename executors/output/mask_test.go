package output

import (
	"bytes"
	"strings"
	"testing"
)

// TestMask feeds each input in pieces of every size from 1 byte up: a path
// split anywhere between two writes is still masked, and nothing that is
// not a path is changed or lost.
func TestMask(t *testing.T) {
	const host = "/var/lib/sandgate/workspaces/s1"
	for _, tc := range []struct {
		name  string
		paths []string
		in    string
		want  string
	}{
		{"whole", []string{host}, "cwd=" + host + "/x\n", "cwd=/workspace/x\n"},
		{"twice and at the end", []string{host}, "a " + host + " b " + host, "a /workspace b /workspace"},
		{"near miss", []string{"/srv/ws/abc"}, "/srv/ws/abd /srv/ws/a", "/srv/ws/abd /srv/ws/a"},
		{"no path", []string{host}, "hello world", "hello world"},
		{"no paths configured", nil, "cwd=" + host, "cwd=" + host},
		{"replacement itself", []string{"/workspace"}, "/workspace/x", "/workspace/x"},
		{"longer alias wins", []string{"/a", "/a/real"}, "/a/real/f and /a/f", "/workspace/f and /workspace/f"},
		{"alias ends the stream", []string{"/a", "/a/real"}, "x /a/rea", "x /workspace/rea"},
		{"parent and child", []string{host, "/var/lib/sandgate"},
			"cwd " + host + "/x.txt and " + host + "\n" + strings.Repeat("z", 100) + host + " /var/lib/sandgate/db",
			"cwd /workspace/x.txt and /workspace\n" + strings.Repeat("z", 100) + "/workspace /workspace/db"},
	} {
		for n := 1; n <= len(tc.in); n++ {
			var got bytes.Buffer
			m := newMasker(tc.paths, "/workspace")
			emit := func(p []byte) { got.Write(p) }
			for i := 0; i < len(tc.in); i += n {
				m.feed([]byte(tc.in[i:min(i+n, len(tc.in))]), emit)
			}
			m.flush(emit)
			if got.String() != tc.want {
				t.Errorf("%s, pieces of %d: %q, want %q", tc.name, n, got.String(), tc.want)
				break
			}
		}
	}
}
