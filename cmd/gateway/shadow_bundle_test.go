package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/policytest"
)

// blockTeamA is the candidate's rule: every run of tenant team-a denied.
const blockTeamA = `package sandgate.exec

deny_reasons contains reason("tenant.blocked", "team-a is suspended") if input.principal.tenant == "team-a"
`

// pemKeyPair is an ES256 key pair as `opa build --signing-key` and OPA's
// keys section take them.
func pemKeyPair(t *testing.T) (private, public string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
}

// TestShadowBundleOnGateway: a gateway whose shadow candidate is a signed
// bundle from a loopback bundle service (policy.shadow_opa_config) runs a
// request as its folder policy decides, while GET /v1/policy/shadow and
// the metrics count the candidate's disagreement; a candidate signed with
// another key is refused, the last good one kept, and the refusal shown.
func TestShadowBundleOnGateway(t *testing.T) {
	tmp := t.TempDir()
	chmodTraversable(t, tmp)
	active, cand := filepath.Join(tmp, "policy"), filepath.Join(tmp, "candidate")
	writePolicyTree(t, active, nil)
	writePolicyTree(t, cand, map[string]string{"sandgate/exec/block.rego": blockTeamA})
	_ = filepath.WalkDir(cand, func(p string, _ os.DirEntry, _ error) error { // a bundle leaves the tests out
		if strings.HasSuffix(p, "_test.rego") {
			return os.Remove(p)
		}
		return nil
	})
	priv, pub := pemKeyPair(t)
	var mu sync.Mutex
	served := policytest.OPABuild(t, cand, "cand-1", priv, "admin")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b := served
		mu.Unlock()
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	indented := "          " + strings.ReplaceAll(strings.TrimSpace(pub), "\n", "\n          ")
	g := startPolicyGateway(t, tmp, fmt.Sprintf(`executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}
browser: {enabled: false}
auth:
  tokens:
    - {name: a, role: agent, tenant: team-a, token: %s}
    - {name: ops, role: admin, token: %s}
policy:
  eval_timeout: 10s
  dir: %s
  shadow_opa_config:
    services: {hub: {url: %s}}
    keys:
      admin:
        algorithm: ES256
        key: |
%s
    bundles:
      candidate: {service: hub, resource: bundles/candidate.tar.gz, signing: {keyid: admin}, polling: {min_delay_seconds: 1, max_delay_seconds: 1}}
`, agentA, adminSecret, active, srv.URL, indented))
	defer g.stop()

	shadow := func() map[string]any {
		st, out, raw := g.call("GET", "/v1/policy/shadow", adminSecret, "")
		if st != 200 {
			t.Fatalf("shadow: %d %s", st, raw)
		}
		return out
	}
	candidate := func(out map[string]any) map[string]any {
		b, _ := out["bundles"].(map[string]any)
		c, _ := b["candidate"].(map[string]any)
		return c
	}
	waitFor := func(what string, cond func(map[string]any) bool) map[string]any {
		deadline := time.Now().Add(30 * time.Second)
		for {
			out := shadow()
			if cond(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("candidate active", func(out map[string]any) bool { return candidate(out)["active_revision"] == "cand-1" })

	st, out, raw := g.call("POST", "/v1/sessions/s/run_code", agentA, `{"code":"print(6*7)","language":"python"}`)
	if st != 200 || out["stdout"] != "42\n" {
		t.Fatalf("the shadow changed the outcome: %d %s", st, raw)
	}
	id := out["decision"].(map[string]any)["decision_id"]
	sh := shadow()
	recent, _ := sh["recent"].([]any)
	if sh["disagreements"].(map[string]any)["sandgate/exec/decision"] != float64(1) || len(recent) != 1 ||
		recent[0].(map[string]any)["decision_id"] != id {
		t.Fatalf("shadow after the run: %v", sh)
	}
	_, _, metrics := g.call("GET", "/metrics", adminSecret, "")
	if want := `sandgate_policy_shadow_disagreements_total{path="sandgate/exec/decision"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %s", want)
	}

	forgedKey, _ := pemKeyPair(t)
	mu.Lock()
	served = policytest.OPABuild(t, cand, "cand-forged", forgedKey, "admin")
	mu.Unlock()
	sh = waitFor("forged candidate refused", func(out map[string]any) bool { return candidate(out)["code"] == "bundle_error" })
	if candidate(sh)["active_revision"] != "cand-1" || !strings.Contains(fmt.Sprint(sh["last_error"]), "signature") {
		t.Fatalf("shadow after a forged candidate: %v", sh)
	}
	if _, out, _ := g.call("GET", "/v1/policy", adminSecret, ""); out["last_error"] != nil {
		t.Fatalf("a refused candidate shows as the active policy's error: %v", out["last_error"])
	}
}

// TestShadowOPAConfigValidation: the shadow's bundles need a signing
// section unless allow_unsigned_bundles, the candidate is a folder or
// bundles, not both, and a valid one reaches the engine's options.
func TestShadowOPAConfigValidation(t *testing.T) {
	tmp := t.TempDir()
	load := func(y string) (Config, error) {
		p := filepath.Join(tmp, "c.yaml")
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadFile(p)
		if err != nil {
			return cfg, err
		}
		return cfg, cfg.Validate()
	}
	for _, tc := range []struct{ name, policy, want string }{
		{"unsigned", `{shadow_opa_config: {services: {h: {url: "http://127.0.0.1:1"}}, bundles: {c: {service: h}}}}`,
			`policy.shadow_opa_config: bundle "c" has no signing.keyid`},
		{"both", `{shadow_dir: /tmp, allow_unsigned_bundles: true, shadow_opa_config: {bundles: {c: {resource: "file:///x.tar.gz"}}}}`, "both set"},
		{"missing file", `{shadow_opa_config: ` + filepath.Join(tmp, "absent.yaml") + `}`, "policy.shadow_opa_config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := load("policy: " + tc.policy + "\n"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	cfg, err := load("policy: {shadow_opa_config: {services: {h: {url: \"http://127.0.0.1:1\", credentials: {bearer: {token: s3cret}}}}, bundles: {c: {service: h, signing: {keyid: k}}}}}\n")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := policyOptions(cfg, nil)
	if err != nil || !strings.Contains(string(opts.ShadowOPAConfig), "s3cret") || opts.PersistDir != filepath.Join(cfg.DataDir, "opa") {
		t.Fatalf("options: %+v %v", opts, err)
	}
	if s := fmt.Sprintf("%+v", cfg); strings.Contains(s, "s3cret") {
		t.Fatalf("shadow_opa_config printed: %s", s)
	}
}
