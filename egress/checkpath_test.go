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
		{"/v1/%25zz/x", ""},  // a literal "%zz"
		{"/v1/100%25/x", ""}, // a literal "%" is fine
		{"/v1/%2541/x", ""},  // decodes twice to "A", harmless
		// Tomcat and Spring resolve a segment by its text before ";".
		{"/v1/items/..;/admin", "dot segment"},
		{"/v1/items/%2e%2e;/admin", "dot segment"},
		{"/v1/items/.;/x", "dot segment"},
		{"/v1/items/..;jsessionid=1/admin", "dot segment"},
		{"/v1/items/.%2E%3b/admin", "dot segment"},
		{"/v1/items/a\\..;/admin", "dot segment"},
		{"/v1/items/a;v=1/b", ""},
		{"/v1/items/...;/b", ""},
		// A server that decodes twice reads these as dot segments or separators.
		{"/v1/%252e%252e/x", "double-encoded"},
		{"/v1/items/%252E%252E/admin", "double-encoded"},
		{"/v1/items%252fadmin", "double-encoded"},
		{"/v1/items%252F..", "double-encoded"},
		{"/v1/items%255cadmin", "double-encoded"},
		{"/v1/items%255C..", "double-encoded"},
		{"/v1/items/%25%32e%25%32e/admin", "double-encoded"},
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

// TestNormalPath: rules meet a path in one spelling whatever escapes the
// sandbox chose, and escapes that matter stay escaped.
func TestNormalPath(t *testing.T) {
	cases := []struct{ target, want string }{
		{"/admin", "/admin"},
		{"/%61dmin", "/admin"},
		{"/o/r.git/git-receive-p%61ck", "/o/r.git/git-receive-pack"},
		{"/%7euser/%2d%5F", "/~user/-_"},
		{"/api/v4/projects/group%2fproject", "/api/v4/projects/group%2Fproject"},
		{"/a%20b", "/a%20b"},
	}
	for _, c := range cases {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + c.target + " HTTP/1.1\r\nHost: h\r\n\r\n")))
		if err != nil {
			t.Fatalf("%s: %v", c.target, err)
		}
		if got := normalPath(req); got != c.want {
			t.Errorf("normalPath(%s) = %q, want %q", c.target, got, c.want)
		}
	}
}
