// Package egresstest holds the loopback stand-ins the egress tests put
// behind the proxy: a real git smart-HTTP server (Debian's git
// http-backend run as CGI) and a PEP 503 simple package index.
package egresstest

import (
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// GitServer is git http-backend serving the bare repositories under Root,
// with pushes enabled (so that only the proxy can refuse one). Log holds
// "METHOD path?query" of every request it served.
type GitServer struct {
	Root string
	mu   sync.Mutex
	log  []string
	cgi  *cgi.Handler
}

// NewGitServer makes a bare repository repo.git under a temporary root
// with one commit on main holding README ("hello from git").
func NewGitServer(t testing.TB) *GitServer {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		if os.Getenv("SANDGATE_REQUIRE_RUNTIME") == "1" {
			t.Fatalf("git is required (scripts/ensure-deps.sh installs it): %v", err)
		}
		t.Skipf("git is not installed: %v", err)
	}
	root := t.TempDir()
	work := filepath.Join(t.TempDir(), "work")
	Git(t, "", nil, "init", "-q", "-b", "main", work)
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("hello from git\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, work, nil, "add", "README")
	Git(t, work, nil, "-c", "user.name=t", "-c", "user.email=t@test", "commit", "-q", "-m", "first")
	Git(t, "", nil, "clone", "-q", "--bare", work, filepath.Join(root, "repo.git"))
	Git(t, filepath.Join(root, "repo.git"), nil, "config", "http.receivepack", "true")
	return &GitServer{Root: root, cgi: &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}}
}

func (g *GitServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.log = append(g.log, r.Method+" "+r.URL.RequestURI())
	g.mu.Unlock()
	g.cgi.ServeHTTP(w, r)
}

// Served is what the server was asked, in order.
func (g *GitServer) Served() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.log...)
}

// Commit adds a commit to the served repository directly (not over
// HTTP), for a fetch to find.
func (g *GitServer) Commit(t testing.TB, file, content string) {
	t.Helper()
	work := filepath.Join(t.TempDir(), "c")
	Git(t, "", nil, "clone", "-q", filepath.Join(g.Root, "repo.git"), work)
	if err := os.WriteFile(filepath.Join(work, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, work, nil, "add", file)
	Git(t, work, nil, "-c", "user.name=t", "-c", "user.email=t@test", "commit", "-q", "-m", "more")
	Git(t, work, nil, "push", "-q", "origin", "main")
}

// Git runs git in dir with env added to a clean environment (no user or
// system configuration) and fails the test on an error.
func Git(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := GitOutput(dir, env, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// GitOutput runs git and returns its combined output and error.
func GitOutput(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "LANG=C"}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%w", err)
	}
	return string(out), nil
}
