package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/policy"
)

// TestEgressConfig: the proxy is on by default with the egress package's
// tunables; a credential needs a host, a header and exactly one of value
// and value_env; pinned hosts must be addresses.
func TestEgressConfig(t *testing.T) {
	c := Default()
	if e := c.Egress; !e.Enabled || e.HandshakeTimeout != 0 || e.MaxTunnelsPerSession != 0 || e.TLSPorts != nil {
		t.Fatalf("default egress %+v: on, with the package's defaults (zero here)", e)
	}
	c.Egress.Credentials = []EgressCredential{
		{Host: "api.example.test", Header: "Authorization", ValueEnv: "API_TOKEN"},
		{Host: "both.example.test", Header: "X-Key", Value: "v", ValueEnv: "V"},
		{Host: "", Header: "X-Key", Value: "v"},
	}
	c.Egress.Hosts = map[string][]string{"db.internal": {"10.1.2.3"}, "bad.internal": {"not-an-ip"}}
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid egress settings were accepted")
	}
	for _, want := range []string{"egress.credentials[1]", "egress.credentials[2]", `egress.hosts[bad.internal]: "not-an-ip"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %s: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "egress.credentials[0]") || strings.Contains(err.Error(), "db.internal") {
		t.Errorf("a valid setting was refused: %v", err)
	}
}

// TestEgressCredentialFromEnvironment: value_env is read from the
// gateway's environment; an empty variable refuses to start, rather than
// sending requests without the credential. The CA is made in the data
// directory, key 0600 (it is made whether or not a credential is bound:
// a reload may mark any host for inspection).
func TestEgressCredentialFromEnvironment(t *testing.T) {
	eng, err := policy.New(context.Background(), policy.Options{EvalTimeout: policytest.EvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.DataDir = t.TempDir()
	cfg.Egress.Credentials = []EgressCredential{{Host: "api.example.test", Header: "Authorization", ValueEnv: "API_TOKEN"}}
	gw := &gateway{cfg: cfg, log: slog.New(slog.DiscardHandler), policy: eng}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if err := gw.egressProxy(nil, prometheus.NewRegistry(), getenv); err == nil || !strings.Contains(err.Error(), "API_TOKEN is empty") {
		t.Fatalf("an empty value_env: %v", err)
	}
	env["API_TOKEN"] = "Bearer secret-value"
	if err := gw.egressProxy(nil, prometheus.NewRegistry(), getenv); err != nil {
		t.Fatal(err)
	}
	if gw.egress == nil || !strings.Contains(string(gw.egress.CACertPEM()), "BEGIN CERTIFICATE") {
		t.Fatal("no gateway CA with a credential bound")
	}
	key, err := os.Stat(filepath.Join(cfg.DataDir, "egress", "ca-key.pem"))
	if err != nil || key.Mode().Perm() != 0o600 {
		t.Fatalf("CA key %v %v, want mode 0600", key, err)
	}
}
