package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClaimAsIdentity builds sandboxd and starts it as root with
// --await-claim: before a claim it refuses everything and a claim for
// root or without a key is refused; a good claim is answered, and the
// same socket then serves the claimed key only, as the claimed uid with
// its gid as its only group, no capability in any set, and the claimed
// home. Needs root (the claim changes identity).
func TestClaimAsIdentity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("an identity claim needs root")
	}
	dir, err := os.MkdirTemp("", "sandboxd-claim-") // sandboxd re-execs itself as the claimed uid: a path it can reach
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandboxd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build sandboxd: %v\n%s", err, out)
	}
	ws, code := filepath.Join(dir, "ws"), filepath.Join(dir, "code")
	for _, d := range []string{ws, code} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "s.sock")
	cmd := exec.Command(bin, "serve", "--await-claim", "--listen", "unix:"+sock, "--workspace", ws, "--code-dir", code)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: 10 * time.Second}
	call := func(method, path, key string, body any) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, "http://sandboxd"+path, rd)
		if key != "" {
			req.Header.Set("X-AIO-API-Key", key)
		}
		for i := 0; ; i++ {
			res, err := hc.Do(req)
			if err != nil {
				if i < 100 {
					time.Sleep(20 * time.Millisecond) // not listening yet
					if body != nil {
						b, _ := json.Marshal(body)
						req.Body = io.NopCloser(bytes.NewReader(b))
					}
					continue
				}
				t.Fatalf("%s %s: %v (sandboxd: %s)", method, path, err, logs.String())
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			return res.StatusCode, string(b)
		}
	}
	const key, other = "claim-as-key-0123456789", "claim-as-other-0123456789"
	ident := map[string]any{"uid": 61010, "gid": 61011, "home": ws}
	steps := []struct {
		name, method, path, key string
		body                    any
		want                    int
	}{
		{"unclaimed refuses a run", "POST", "/v1/bash/exec", key, map[string]any{"command": "true"}, 401},
		{"unclaimed refuses the sandbox", "GET", "/v1/sandbox", key, nil, 401},
		{"a claim for root", "POST", "/v1/claim", key, map[string]any{"uid": 0, "gid": 5}, 400},
		{"a claim for group root", "POST", "/v1/claim", key, map[string]any{"uid": 5, "gid": 0}, 400},
		{"a claim without a key", "POST", "/v1/claim", "", ident, 400},
		{"a claim without an identity", "POST", "/v1/claim", key, nil, 400},
		{"a relative home", "POST", "/v1/claim", key, map[string]any{"uid": 5, "gid": 5, "home": "x"}, 400},
		{"claim", "POST", "/v1/claim", key, ident, 200},
		{"the claimed key serves", "GET", "/v1/sandbox", key, nil, 200},
		{"another key is refused", "GET", "/v1/sandbox", other, nil, 401},
	}
	for _, s := range steps {
		if got, body := call(s.method, s.path, s.key, s.body); got != s.want {
			t.Fatalf("%s: status %d, want %d: %s", s.name, got, s.want, body)
		}
	}
	_, body := call("POST", "/v1/bash/exec", key, map[string]any{"command": `echo "$(id -u) $(id -g) [$(id -G)] $HOME"; ` +
		`grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status | tr -d '\t' | sort | paste -sd ' ' -; ` +
		`ps -o user= -p $PPID | tr -d ' '`})
	var res struct {
		Data struct {
			Stdout string `json:"stdout"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatalf("bash exec: %v: %s", err, body)
	}
	want := "61010 61011 [61011] " + ws + "\n" +
		"CapAmb:0000000000000000 CapBnd:0000000000000000 CapEff:0000000000000000 CapInh:0000000000000000 CapPrm:0000000000000000\n" +
		"61010"
	if got := strings.TrimSpace(res.Data.Stdout); got != want {
		t.Errorf("a command of the claimed sandboxd:\n%s\nwant:\n%s", got, want)
	}
}
