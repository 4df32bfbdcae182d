package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sandgate/sandgate/internal/jwttest"
	"github.com/sandgate/sandgate/workspace"
)

const (
	testAudience = "sandgate-test"
	testIssuer   = "https://idp.test"
)

func claims(sub, role, tenant string, ttl time.Duration, extra map[string]any) jwttest.Claims {
	c := jwttest.Claims{Claims: jwttest.Standard(sub, testIssuer, testAudience, ttl), Extra: map[string]any{"role": role, "tenant": tenant}}
	for k, v := range extra {
		c.Extra[k] = v
	}
	return c
}

// jwtFileEnv is a gateway accepting JWTs signed by rsa (kid "r1") or ec
// (kid "e1"), whose JWKS is a file.
func jwtFileEnv(t *testing.T, rsa, ec jwttest.Key) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKS(t, rsa, ec), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := NewJWKSFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTVerifier(JWTConfig{Audience: testAudience, Issuer: testIssuer, Keys: keys, ValidTenant: workspace.ValidateTenant})
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, envOpts{jwt: v})
}

// TestJWT: RS256 and ES256 JWTs from the configured JWKS authenticate and
// map their claims to role and tenant; every other JWT gets 401.
func TestJWT(t *testing.T) {
	rsa, ec := jwttest.NewRSA(t, "r1"), jwttest.NewEC(t, "e1")
	e := jwtFileEnv(t, rsa, ec)
	stranger := jwttest.NewRSA(t, "r1") // same kid, a key the JWKS does not hold
	hour := time.Hour
	noExp := claims("svc-a", "agent", "team-a", hour, nil)
	noExp.Expiry = nil
	wrongIss := claims("svc-a", "agent", "team-a", hour, nil)
	wrongIss.Issuer = "https://evil.test"
	cases := []struct {
		name  string
		token string
		want  int
	}{
		{"RS256 agent", jwttest.Sign(t, rsa, claims("svc-a", "agent", "team-a", hour, nil), false), 200},
		{"ES256 agent", jwttest.Sign(t, ec, claims("svc-b", "agent", "team-b", hour, nil), false), 200},
		{"without kid: every suitable key is tried", jwttest.Sign(t, ec, claims("svc-b", "agent", "team-b", hour, nil), true), 200},
		{"wrong audience", jwttest.Sign(t, rsa, jwttest.Claims{Claims: jwttest.Standard("svc-a", testIssuer, "other-service", hour),
			Extra: map[string]any{"role": "agent", "tenant": "team-a"}}, false), 401},
		{"expired", jwttest.Sign(t, rsa, claims("svc-a", "agent", "team-a", -2*time.Minute, nil), false), 401},
		{"no expiry", jwttest.Sign(t, rsa, noExp, false), 401},
		{"wrong issuer", jwttest.Sign(t, rsa, wrongIss, false), 401},
		{"signed by another key", jwttest.Sign(t, stranger, claims("svc-a", "agent", "team-a", hour, nil), false), 401},
		{"HS256 with the kid of a public key", jwttest.SignHS256(t, []byte("0123456789abcdef0123456789abcdef"), "r1", claims("svc-a", "agent", "team-a", hour, nil)), 401},
		{"unsigned (alg none)", "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJzdmMtYSIsInJvbGUiOiJhZ2VudCIsInRlbmFudCI6InRlYW0tYSJ9.", 401},
		{"no tenant", jwttest.Sign(t, rsa, claims("svc-a", "agent", "", hour, nil), false), 401},
		{"invalid tenant", jwttest.Sign(t, rsa, claims("svc-a", "agent", "team a", hour, nil), false), 401},
		{"unknown role", jwttest.Sign(t, rsa, claims("svc-a", "root", "team-a", hour, nil), false), 401},
		{"no subject", jwttest.Sign(t, rsa, claims("", "agent", "team-a", hour, nil), false), 401},
		{"tampered payload", tamper(jwttest.Sign(t, rsa, claims("svc-a", "agent", "team-a", hour, nil), false)), 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("GET", "/v1/sessions", tc.token, nil)
			if r.status != tc.want {
				t.Fatalf("%d %s, want %d", r.status, r.raw, tc.want)
			}
			if tc.want == 401 && (r.errCode() != "unauthorized" || r.header.Get("WWW-Authenticate") == "") {
				t.Fatalf("refusal %s", r.raw)
			}
		})
	}

	// A valid JWT's tenant owns the sessions it creates; the same name
	// under the other tenant's JWT is another session.
	a := jwttest.Sign(t, rsa, claims("svc-a", "agent", "team-a", hour, nil), false)
	b := jwttest.Sign(t, ec, claims("svc-b", "agent", "team-b", hour, nil), false)
	if r := e.do("PUT", "/v1/sessions/demo/files/content?path=x", a, "from a"); r.status != 201 {
		t.Fatalf("team-a's upload: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/sessions/demo", a, nil); r.status != 200 || r.body["tenant"] != "team-a" || r.body["qualified_id"] != "team-a~demo" {
		t.Fatalf("team-a's session: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/sessions/demo/files/content?path=x", b, nil); r.status != 404 {
		t.Fatalf("team-b reads team-a's file: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/sessions/team-a~demo", b, nil); r.status != 404 {
		t.Fatalf("team-b describes team-a's session: %d %s", r.status, r.raw)
	}
	recs := e.auditRecords("demo")
	if len(recs) == 0 || recs[len(recs)-1].Tenant != "team-a" || recs[len(recs)-1].Principal != "agent:svc-a" {
		t.Fatalf("audit %+v", recs)
	}
	// An agent JWT never approves; an admin JWT reads the audit log.
	if r := e.do("GET", "/v1/audit", a, nil); r.status != 403 {
		t.Fatalf("agent JWT on /v1/audit: %d", r.status)
	}
	admin := jwttest.Sign(t, rsa, claims("ops", "admin", "ops", hour, nil), false)
	if r := e.do("GET", "/v1/audit?tenant=team-a", admin, nil); r.status != 200 {
		t.Fatalf("admin JWT: %d %s", r.status, r.raw)
	}
}

func tamper(tok string) string {
	b := []byte(tok)
	for i := range b {
		if b[i] == '.' { // the first character of the payload
			b[i+1] ^= 1
			break
		}
	}
	return string(b)
}

// TestJWTApproverScope: an approver JWT sees its own tenant only, the
// tenants of its tenants claim, or every tenant with "*".
func TestJWTApproverScope(t *testing.T) {
	rsa := jwttest.NewRSA(t, "r1")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKS(t, rsa), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := NewJWKSFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTVerifier(JWTConfig{Audience: testAudience, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  []string
		ok    bool
	}{
		{"no claim: its own tenant", nil, []string{"team-a"}, true},
		{"a list", map[string]any{"tenants": []string{"team-b", "team-c"}}, []string{"team-b", "team-c"}, true},
		{"every tenant", map[string]any{"tenants": []string{"*"}}, nil, true},
		{"not a list", map[string]any{"tenants": "team-b"}, nil, false},
		{"empty list", map[string]any{"tenants": []string{}}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := v.Verify(context.Background(), jwttest.Sign(t, rsa, claims("lead", "approver", "team-a", time.Hour, tc.extra), false))
			if (err == nil) != tc.ok {
				t.Fatalf("Verify: %v", err)
			}
			if err == nil && (id.Role != RoleApprover || len(id.Tenants) != len(tc.want) || (len(tc.want) > 0 && id.Tenants[0] != tc.want[0])) {
				t.Fatalf("identity %+v, want scope %v", id, tc.want)
			}
		})
	}
}

// TestJWKSURLRotation: keys come from a JWKS URL; a token signed by a key
// published after the last fetch makes the gateway fetch again, once per
// interval, and then it is accepted.
func TestJWKSURLRotation(t *testing.T) {
	old, rotated := jwttest.NewRSA(t, "k1"), jwttest.NewEC(t, "k2")
	var mu sync.Mutex
	doc := jwttest.JWKS(t, old)
	var fetches atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	}))
	defer idp.Close()
	keys := NewJWKSURL(idp.URL, JWKSURLOptions{MinInterval: 200 * time.Millisecond})
	v, err := NewJWTVerifier(JWTConfig{Audience: testAudience, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{jwt: v})
	if r := e.do("GET", "/v1/sessions", jwttest.Sign(t, old, claims("svc", "agent", "team-a", time.Hour, nil), false), nil); r.status != 200 {
		t.Fatalf("old key: %d %s", r.status, r.raw)
	}
	newTok := jwttest.Sign(t, rotated, claims("svc", "agent", "team-a", time.Hour, nil), false)
	if r := e.do("GET", "/v1/sessions", newTok, nil); r.status != 401 {
		t.Fatalf("a key the IdP has not published: %d", r.status)
	}
	mu.Lock()
	doc = jwttest.JWKS(t, old, rotated)
	mu.Unlock()
	// Unknown kids within the interval do not fetch again.
	n := fetches.Load()
	for range 5 {
		e.do("GET", "/v1/sessions", newTok, nil)
	}
	if got := fetches.Load(); got > n+1 {
		t.Fatalf("%d fetches for 5 unknown-kid tokens within the interval", got-n)
	}
	time.Sleep(250 * time.Millisecond)
	if r := e.do("GET", "/v1/sessions", newTok, nil); r.status != 200 {
		t.Fatalf("after the rotation: %d %s", r.status, r.raw)
	}
}

// TestJWTRefusalReasons: the 401s above are for the reason their names
// say, not for an earlier failure.
func TestJWTRefusalReasons(t *testing.T) {
	rsa := jwttest.NewRSA(t, "r1")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwttest.JWKS(t, rsa), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := NewJWKSFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTVerifier(JWTConfig{Audience: testAudience, Issuer: testIssuer, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	wrongAud := jwttest.Claims{Claims: jwttest.Standard("svc", testIssuer, "other", time.Hour), Extra: map[string]any{"role": "agent", "tenant": "t"}}
	for name, c := range map[string]struct {
		tok  string
		want error
	}{
		"expired":        {jwttest.Sign(t, rsa, claims("svc", "agent", "t", -2*time.Minute, nil), false), jwt.ErrExpired},
		"wrong audience": {jwttest.Sign(t, rsa, wrongAud, false), jwt.ErrInvalidAudience},
		"foreign key":    {jwttest.Sign(t, jwttest.NewRSA(t, "r1"), claims("svc", "agent", "t", time.Hour, nil), false), ErrJWTSignature},
		"HS256":          {jwttest.SignHS256(t, []byte("0123456789abcdef0123456789abcdef"), "r1", claims("svc", "agent", "t", time.Hour, nil)), ErrJWTMalformed},
	} {
		if _, err := v.Verify(context.Background(), c.tok); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// TestHashedToken: a token configured as its SHA-256 authenticates with
// the secret, never with the hash itself.
func TestHashedToken(t *testing.T) {
	const secret = "team-c-agent-secret-0123456789"
	sum, err := ParseSecret("sha256:" + sha256Hex(secret))
	if err != nil {
		t.Fatal(err)
	}
	tok := NewHashedToken("bot-c", RoleAgent, sum)
	tok.Tenant = "team-c"
	e := newEnv(t, envOpts{tokens: []Token{tok}})
	if r := e.do("PUT", "/v1/sessions/s/files/content?path=x", secret, "x"); r.status != 201 {
		t.Fatalf("the secret: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/sessions/s", secret, nil); r.body["tenant"] != "team-c" {
		t.Fatalf("tenant: %s", r.raw)
	}
	for _, wrong := range []string{"sha256:" + sha256Hex(secret), sha256Hex(secret)} {
		if r := e.do("GET", "/v1/sessions", wrong, nil); r.status != 401 {
			t.Fatalf("the hash %q as a bearer token: %d", wrong[:12], r.status)
		}
	}
	for _, bad := range []string{"sha256:xyz", "sha256:" + sha256Hex(secret)[:60]} {
		if _, err := ParseSecret(bad); err == nil {
			t.Errorf("ParseSecret(%q) accepted", bad)
		}
	}
}
