package main

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/executors/subprocess"
)

func noEnv(string) string { return "" }

func TestDefaultIsValidAndSafe(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8080" || c.Mode != "STRICT" || c.Approval.AutoApprove || !IsLoopback(c.Listen) {
		t.Fatalf("unsafe default: %+v", c)
	}
	if !c.Executors.Subprocess.Zygotes || c.Executors.Subprocess.WarmMax <= 0 {
		t.Errorf("subprocess defaults: %+v, want warm starts and zygotes on", c.Executors.Subprocess)
	}
	if d := c.DeerFlow; !d.Enabled || d.PublicURL != "" {
		t.Errorf("deerflow defaults: %+v, want enabled, URLs from the request", d)
	}
	if d := c.Daytona; !d.Enabled || d.PublicURL != "" {
		t.Errorf("daytona defaults: %+v, want enabled, the toolbox URL from the request", d)
	}
	if g := c.Executors.GVisor; !g.Enabled || g != (DockerConfig{Enabled: true}) {
		t.Errorf("gvisor defaults: %+v, want enabled with the packages' defaults (runtime runsc)", g)
	}
}

// TestExecutorDefaultsInOnePlace: the shipped defaults of the executors
// are their packages' own. Whatever the gateway's default config hands an
// executor is zero (the package default applies) or that very default;
// a number restated here that disagrees with the package fails.
func TestExecutorDefaultsInOnePlace(t *testing.T) {
	c := Default()
	sp := subprocessConfig(c.Executors.Subprocess, nil)
	d := dockerConfig(c.Executors.Docker, nil)
	checks := []defaultCheck{
		{"subprocess warm_max", sp.WarmMax, subprocess.DefaultWarmMax},
		{"subprocess tmp_mb", sp.TmpMB, subprocess.DefaultTmpMB},
		{"docker cpus", d.CPUs, docker.DefaultCPUs},
		{"docker tmpfs_mb", d.TmpfsMB, docker.DefaultTmpfsMB},
		{"docker warm_max", d.WarmMax, docker.DefaultWarmMax},
		{"docker warm_idle", d.WarmIdle, docker.DefaultWarmIdle},
		{"docker warm_per_session", d.WarmPerSession, docker.DefaultWarmPerSession},
	}
	for lang, img := range d.Images {
		checks = append(checks, defaultCheck{"docker image " + lang, img, docker.DefaultImage})
	}
	checks = append(checks, limitChecks("subprocess", sp.Limits, subprocess.DefaultLimits)...)
	checks = append(checks, limitChecks("docker", d.Limits, docker.DefaultLimits)...)
	for _, ch := range checks {
		if !reflect.ValueOf(ch.got).IsZero() && ch.got != ch.want {
			t.Errorf("%s: the gateway's default is %v, the executor's %v", ch.name, ch.got, ch.want)
		}
	}
	if sp.DisableWarm || sp.DisableZygote {
		t.Errorf("subprocess: warm starts and zygotes must be on by default: %+v", sp)
	}
}

// defaultCheck is one value the gateway hands an executor and the
// executor's own default for it.
type defaultCheck struct {
	name      string
	got, want any
}

// limitChecks pairs every field of got with the same field of def, so a
// limit added later is checked too.
func limitChecks(kind string, got, def executors.Limits) []defaultCheck {
	var out []defaultCheck
	g, d := reflect.ValueOf(got), reflect.ValueOf(def)
	for i := range g.NumField() {
		name := fmt.Sprintf("%s limits.%s", kind, g.Type().Field(i).Name)
		out = append(out, defaultCheck{name, g.Field(i).Interface(), d.Field(i).Interface()})
	}
	return out
}

func TestLoadFull(t *testing.T) {
	c, err := loadConfig([]string{"--config", "testdata/full.yaml"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9090" || c.Mode != "PERMISSIVE" || c.Policy.EvalTimeout != 50*time.Millisecond ||
		c.Server.WriteTimeout != 5*time.Minute || len(c.Auth.Tokens) != 2 || c.Executors.Subprocess.MaxProcs != 64 || c.Executors.Subprocess.Zygotes ||
		c.Executors.Subprocess.RootDir != "/var/lib/sandgate/rootfs/runtime" || c.Executors.Subprocess.TmpMB != 32 {
		t.Fatalf("decoded %+v", c)
	}
	if m := c.MCP; !m.Enabled || m.PublicURL != "https://gate.example.com" || len(m.AllowedHosts) != 1 || len(m.AllowedOrigins) != 1 ||
		m.SessionTimeout != 10*time.Minute || m.ProgressInterval != 3*time.Second || !m.PurgeOnClose {
		t.Fatalf("decoded mcp %+v", m)
	}
	if d := c.DeerFlow; !d.Enabled || d.PublicURL != "https://gate.example.com/" {
		t.Fatalf("decoded deerflow %+v", d)
	}
	if d := c.Daytona; d.Enabled || d.PublicURL != "https://gate.example.com/sandgate" {
		t.Fatalf("decoded daytona %+v", d)
	}
	if u := c.Egress.UpgradeProtocols; len(u) != 2 || u[0] != "websocket" || u[1] != "IRC/6.9" {
		t.Fatalf("egress upgrade_protocols decoded %q", u)
	}
	if g := c.Executors.GVisor; g != (DockerConfig{Enabled: true, Runtime: "runsc-kvm", Instance: "gw-2", MemoryMB: 384, WarmMax: 2, WarmPerSession: 3}) {
		t.Fatalf("gvisor decoded %+v", g)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"unknown key is an error", []string{"--config", "testdata/unknown_key.yaml"}, nil, []string{"mdoe"}},
		{"every problem at once", []string{"--config", "testdata/many_errors.yaml"}, nil, []string{
			"listen", "mode \"LAX\"", "approval.timeout", "auto_approve", "role \"root\"", "name is required", "at least 16", "log.level",
			"executors.subprocess", "executors.docker", "executors.gvisor"}},
		{"bad tenants", []string{"--config", "testdata/bad_tenants.yaml"}, nil, []string{
			`tenant "team a bot"`, "set tenant:", "tenants limits an approver", `"bad tenant" is not a valid tenant`,
			"tenants.quotas: quotas must not be negative", "burst must be at least 1", `tenants.overrides: "team b"`}},
		{"bad jwt", []string{"--config", "testdata/bad_jwt.yaml"}, nil, []string{
			"auth.jwt.audience is required", "exactly one of jwks_file and jwks_url", `jwks_url "http://idp.example.com/jwks"`}},
		{"bad hashed token", []string{"--config", "testdata/bad_hash.yaml"}, nil, []string{"64 hex digits", "configured twice"}},
		{"missing file", []string{"--config", "testdata/absent.yaml"}, nil, []string{"absent.yaml"}},
		{"bad flag mode", []string{"--mode", "YOLO"}, nil, []string{"YOLO"}},
		{"bad env mode", nil, map[string]string{"SANDGATE_MODE": "lax"}, []string{"lax"}},
		{"short env token", nil, map[string]string{"SANDGATE_AGENT_TOKEN": "abc"}, []string{"at least 16"}},
		{"stray argument", []string{"serve"}, nil, []string{"unexpected"}},
		{"unknown storage driver", nil, map[string]string{"SANDGATE_STORAGE_DRIVER": "mysql"}, []string{`storage.driver "mysql"`}},
		{"postgres without a dsn", nil, map[string]string{"SANDGATE_STORAGE_DRIVER": "postgres"}, []string{"storage.dsn is required"}},
		{"dsn with sqlite", nil, map[string]string{"SANDGATE_STORAGE_DSN": "host=/tmp"}, []string{"storage.driver is sqlite"}},
		{"advertise url without a scheme", nil, map[string]string{"SANDGATE_ADVERTISE_URL": "10.0.0.11:8080"}, []string{`storage.advertise_url "10.0.0.11:8080"`}},
		{"advertise url with a path", nil, map[string]string{"SANDGATE_ADVERTISE_URL": "http://gw-a:8080/sandgate"}, []string{"storage.advertise_url"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadConfig(c.args, func(k string) string { return c.env[k] }, io.Discard)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestPrecedence(t *testing.T) {
	env := map[string]string{"SANDGATE_LISTEN": "127.0.0.1:7000", "SANDGATE_MODE": "PERMISSIVE", "SANDGATE_DATA_DIR": "/tmp/env"}
	c, err := loadConfig([]string{"--config", "testdata/full.yaml", "--listen", "127.0.0.1:7001"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7001" || c.Mode != "PERMISSIVE" || c.DataDir != "/tmp/env" {
		t.Fatalf("flags > env > file not respected: %+v", c)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:80": true, "localhost:1": true, "127.3.4.5:9": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.1:80": false, "[::]:80": false, "example.com:80": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
}

// TestTokenTenants: a token's tenant is its own setting or, by default, its
// name; an approver's tenants list is kept as its scope.
func TestTokenTenants(t *testing.T) {
	c, err := loadConfig([]string{"--config", "testdata/tenants.yaml"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	gw := &gateway{cfg: c}
	toks, err := gw.tokens()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tok := range toks {
		got[tok.Name] = tok.Tenant + "|" + strings.Join(tok.Tenants, ",")
	}
	want := map[string]string{"ci-a": "team-a|", "ci-b": "team-b|", "lead-a": "lead-a|team-a", "oncall": "oncall|", "solo": "solo|"}
	if len(got) != len(want) {
		t.Fatalf("tokens %v", got)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: tenant|scope %q, want %q", name, got[name], w)
		}
	}
}

// TestTenantQuotas: an override keeps the defaults it does not set; every
// configured tenant may label metrics.
func TestTenantQuotas(t *testing.T) {
	c, err := loadConfig([]string{"--config", "testdata/tenants.yaml"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	gw := &gateway{cfg: c}
	toks, err := gw.tokens()
	if err != nil {
		t.Fatal(err)
	}
	q := quotaConfig(c, toks)
	a, b := q.For("team-a"), q.For("team-b")
	if a.MaxSessions != 100 || a.MaxConcurrentRuns != 8 || a.MaxWorkspaceBytes != 4096<<20 || a.RequestsPerSecond != 20 || a.Burst != 40 {
		t.Errorf("team-a (defaults): %+v", a)
	}
	if b.MaxSessions != 100 || b.MaxConcurrentRuns != 2 || b.MaxWorkspaceBytes != 4096<<20 || b.RequestsPerSecond != 5 || b.Burst != 5 {
		t.Errorf("team-b (override): %+v", b)
	}
	for _, name := range []string{"team-a", "team-b", "lead-a", "oncall", "solo"} {
		if !slices.Contains(q.Labels, name) {
			t.Errorf("labels %v lack %s", q.Labels, name)
		}
	}
	if d := Default().Tenants.Quotas; d.MaxSessions <= 0 || d.MaxConcurrentRuns <= 0 || d.MaxWorkspaceMiB <= 0 || d.RequestsPerSecond <= 0 {
		t.Errorf("default quotas are not all finite: %+v", d)
	}
}
