package egress

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/egresstest"
)

// toolEnv is what an executor gives a run granted network: the proxy
// variables and a CA bundle with the gateway CA (here with the test
// upstream CA too, for hosts that are not intercepted).
func (h *harness) toolEnv(t *testing.T, proxy string) []string {
	t.Helper()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	pem := append(append([]byte{}, h.svc.CACertPEM()...), pemOf(h.pki)...)
	if err := os.WriteFile(bundle, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"HTTPS_PROXY=http://" + proxy, "HTTP_PROXY=http://" + proxy, "https_proxy=http://" + proxy,
		"GIT_SSL_CAINFO=" + bundle, "SSL_CERT_FILE=" + bundle, "PIP_CERT=" + bundle, "REQUESTS_CA_BUNDLE=" + bundle}
}

// TestGitThroughGithubReadonly: with the github-readonly preset, git
// clone and fetch from a real git http-backend succeed; git push is
// refused by the proxy's 403, whose message git shows, and never reaches
// the server.
func TestGitThroughGithubReadonly(t *testing.T) {
	t.Parallel()
	h, _ := setup(t, func(*upstreams) []rule { return nil })
	git := egresstest.NewGitServer(t)
	srv := h.pki.tlsServer(t, git, "git.test")
	port := portOf(t, srv)
	h.res.set("git.test", "127.0.0.1")
	h.reload([]rule{{"name": "gh", "action": "allow", "request_preset": "github-readonly", "hosts": []string{"git.test"},
		"ports": []int{port}, "cidrs": []string{"127.0.0.1/32"}}})
	proxy := h.listen(binding("team-a", "git"))
	env := h.toolEnv(t, proxy)
	url := fmt.Sprintf("https://git.test:%d/repo.git", port)
	dir := filepath.Join(t.TempDir(), "clone")

	egresstest.Git(t, "", env, "clone", "-q", url, dir)
	if b, err := os.ReadFile(filepath.Join(dir, "README")); err != nil || string(b) != "hello from git\n" {
		t.Fatalf("clone: README %q %v", b, err)
	}
	git.Commit(t, "NEWS", "fetched\n")
	egresstest.Git(t, dir, env, "fetch", "-q", "origin")
	if out := egresstest.Git(t, dir, env, "show", "origin/main:NEWS"); out != "fetched\n" {
		t.Errorf("fetch: NEWS %q", out)
	}

	if err := os.WriteFile(filepath.Join(dir, "PUSHED"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	egresstest.Git(t, dir, env, "add", "PUSHED")
	egresstest.Git(t, dir, env, "-c", "user.name=a", "-c", "user.email=a@test", "commit", "-q", "-m", "push me")
	out, err := egresstest.GitOutput(dir, env, "push", "origin", "HEAD:main")
	t.Logf("git push through the proxy:\n%s", out)
	if err == nil {
		t.Fatalf("git push went through:\n%s", out)
	}
	if !strings.Contains(out, "remote: sandgate egress: GET git.test:") || !strings.Contains(out, `denied by rule "gh/no-push"`) ||
		!strings.Contains(out, `"decision":"deny"`) {
		t.Errorf("git does not show the proxy's refusal:\n%s", out)
	}
	for _, r := range git.Served() {
		if strings.Contains(r, "receive-pack") {
			t.Errorf("the server was asked %q", r)
		}
	}
}

// TestPipThroughPypiInstall: with the pypi-install preset, pip downloads
// a wheel from a loopback simple index; an upload to the index is
// refused and never reaches it.
func TestPipThroughPypiInstall(t *testing.T) {
	t.Parallel()
	pip, err := exec.LookPath("pip3")
	if err != nil {
		if os.Getenv("SANDGATE_REQUIRE_RUNTIME") == "1" {
			t.Fatal("pip3 is required")
		}
		t.Skip("pip3 is not installed")
	}
	h, _ := setup(t, func(*upstreams) []rule { return nil })
	index := egresstest.NewPackageIndex(t)
	srv := h.pki.tlsServer(t, index, "pypi.test")
	port := portOf(t, srv)
	h.res.set("pypi.test", "127.0.0.1")
	h.reload([]rule{{"name": "pypi", "action": "allow", "request_preset": "pypi-install", "hosts": []string{"pypi.test"},
		"ports": []int{port}, "cidrs": []string{"127.0.0.1/32"}}})
	proxy := h.listen(binding("team-a", "pip"))
	env := h.toolEnv(t, proxy)
	dest := t.TempDir()
	cmd := exec.Command(pip, "download", "--no-deps", "--disable-pip-version-check", "--no-cache-dir", "-q",
		"--index-url", fmt.Sprintf("https://pypi.test:%d/simple/", port), "-d", dest, egresstest.Package+"==1.0")
	cmd.Env = append(append(os.Environ(), env...), "PIP_CONFIG_FILE=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip download: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dest, index.WheelName)); err != nil || len(b) != len(index.Wheel) {
		t.Fatalf("the wheel was not downloaded: %v", err)
	}
	// An upload as twine sends it: POST multipart to /legacy/.
	req, _ := http.NewRequest("POST", fmt.Sprintf("https://pypi.test:%d/legacy/", port), strings.NewReader("--x--\r\n"))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	resp, err := h.client(proxy).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if d := readDenied(t, resp); d.Rule != "pypi" || d.Method != "POST" {
		t.Errorf("upload refusal %+v", d)
	}
	if slices.ContainsFunc(index.Served(), func(s string) bool { return strings.HasPrefix(s, "POST") }) {
		t.Errorf("the index was sent an upload: %q", index.Served())
	}
}

// pemOf is the test upstream CA's certificate.
func pemOf(p *testPKI) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.cert.Raw})
}
