package egress

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// TestCheckPath: a path whose segments decode to something the policy was
// not asked about is refused before any rule sees it.
func TestCheckPath(t *testing.T) {
	cases := []struct {
		target string
		refuse string // "" when the path passes
	}{
		{"/v1/repos/a/b", ""},
		{"/v1/a%20b", ""},
		{"/v1/%252e%252e/x", ""}, // decodes once to a literal "%2e%2e" segment
		{"/", ""},
		{"/v1/../admin", "dot segment"},
		{"/v1/%2e%2e/admin", "dot segment"},
		{"/v1/%2E./admin", "dot segment"},
		{"/a/./b", "dot segment"},
		{"/v1/..%2fadmin", "dot segment"},
		{"/v1/x%2F..%2Fadmin", "dot segment"},
		{"/v1/a%5c..%5cadmin", "dot segment"},
		{"/v1/a\\..", "dot segment"},
		{"/api/v4/projects/group%2Fproject", ""},
		{"/v1/a\\b", ""},
	}
	for _, c := range cases {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + c.target + " HTTP/1.1\r\nHost: h\r\n\r\n")))
		if err != nil {
			t.Fatalf("%s: %v", c.target, err)
		}
		got := checkPath(req)
		if (c.refuse == "") != (got == "") || !strings.Contains(got, c.refuse) {
			t.Errorf("%s: checkPath = %q, want it to say %q", c.target, got, c.refuse)
		}
	}
}
