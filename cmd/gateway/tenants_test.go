package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/jwttest"
)

// TestGatewayHashedTokensAndJWT starts the gateway as an operator would
// configure two teams: team-a's agent token is in the file only as its
// SHA-256, team-b's agents come with JWTs from an identity provider (a
// JWKS file). The hashed token works with its secret; a valid JWT maps to
// its tenant; a JWT for another audience, or expired, gets 401; and no
// token or JWT appears in the logs, even at debug level.
func TestGatewayHashedTokensAndJWT(t *testing.T) {
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	const secretA = "team-a-agent-secret-0123456789"
	const adminSecret = "admin-secret-0123456789abcdef"
	sum := sha256.Sum256([]byte(secretA))
	key := jwttest.NewEC(t, "idp-1")
	jwks := filepath.Join(tmp, "jwks.json")
	if err := os.WriteFile(jwks, jwttest.JWKS(t, key), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(tmp, "gateway.yaml")
	yaml := fmt.Sprintf(`log: {level: debug}
executors: {docker: {enabled: false}, aio: {enabled: false}}
browser: {enabled: false}
auth:
  tokens:
    - {name: ci-a, role: agent, tenant: team-a, token: "sha256:%s"}
    - {name: ops, role: admin, token: %s}
  jwt:
    audience: sandgate
    issuer: https://idp.test
    jwks_file: %s
tenants:
  overrides:
    team-b: {max_sessions: 5}
`, hex.EncodeToString(sum[:]), adminSecret, jwks) + testPolicyYAML
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, logs syncBuf
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--config", conf, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(tmp, "data")}, noEnv, &stdout, &logs)
	}()
	base := waitBanner(t, &stdout, &logs, done)

	mint := func(aud string, ttl time.Duration) string {
		return jwttest.Sign(t, key, jwttest.Claims{Claims: jwttest.Standard("svc-b", "https://idp.test", aud, ttl),
			Extra: map[string]any{"role": "agent", "tenant": "team-b"}}, false)
	}
	good, wrongAud, expired := mint("sandgate", time.Hour), mint("other", time.Hour), mint("sandgate", -time.Hour)
	call := func(method, path, tok, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		raw, _ := io.ReadAll(res.Body)
		_ = json.Unmarshal(raw, &out)
		return res.StatusCode, out
	}
	run := `{"code":"print(6*7)","language":"python"}`
	if st, out := call("POST", "/v1/sessions/demo/run_code", secretA, run); st != 200 || out["stdout"] != "42\n" {
		t.Fatalf("hashed token: %d %v", st, out)
	}
	if st, _ := call("GET", "/v1/sessions", "sha256:"+hex.EncodeToString(sum[:]), ""); st != 401 {
		t.Fatalf("the hash as a token: %d", st)
	}
	if st, out := call("POST", "/v1/sessions/demo/run_code", good, run); st != 200 || out["stdout"] != "42\n" {
		t.Fatalf("valid JWT: %d %v", st, out)
	}
	if st, out := call("GET", "/v1/sessions/demo", good, ""); st != 200 || out["tenant"] != "team-b" || out["qualified_id"] != "team-b~demo" {
		t.Fatalf("JWT's session: %d %v", st, out)
	}
	for name, tok := range map[string]string{"wrong audience": wrongAud, "expired": expired} {
		if st, out := call("GET", "/v1/sessions", tok, ""); st != 401 {
			t.Errorf("%s JWT: %d %v", name, st, out)
		}
	}
	_, out := call("GET", "/v1/audit?tenant=team-b&session_id=demo", adminSecret, "")
	if recs, _ := out["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["principal"] != "agent:svc-b" {
		t.Fatalf("team-b's audit: %v", out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for name, secret := range map[string]string{"token": secretA, "admin token": adminSecret, "JWT": good,
		"rejected JWT": wrongAud, "JWT signature": good[strings.LastIndex(good, ".")+1:]} {
		if strings.Contains(logs.String(), secret) || strings.Contains(stdout.String(), secret) {
			t.Errorf("the %s appears in the output", name)
		}
	}
}

// waitBanner waits for the gateway's banner and returns its base URL.
func waitBanner(t *testing.T, stdout, logs *syncBuf, done chan error) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := bannerRe.FindStringSubmatch(stdout.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("gateway exited: %v; logs %s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner; stdout %q logs %q", stdout.String(), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
