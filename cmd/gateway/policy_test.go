package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/policy"
)

// writePolicyTree writes the shipped policy to dir, every run routed to
// the subprocess executor (so the tests need no container engine), with
// extra files on top.
func writePolicyTree(t *testing.T, dir string, extra map[string]string) {
	t.Helper()
	tree, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(tree["sandgate/config/data.json"].Data, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, levels := range cfg["modes"].(map[string]any) {
		for _, row := range levels.(map[string]any) {
			row.(map[string]any)["executor"] = "subprocess"
		}
	}
	cfg["isolation_upgrade"].(map[string]any)["modes"] = []any{}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"sandgate/config/data.json": b}
	for p, f := range tree {
		if _, ok := files[p]; !ok {
			files[p] = f.Data
		}
	}
	for p, s := range extra {
		files[p] = []byte(s)
	}
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// logSink is a loopback OPA decision-log service: POST /logs takes a
// gzipped JSON array of events, as OPA's decision-log plugin sends them.
type logSink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events []map[string]any
}

func newLogSink(t *testing.T) *logSink {
	s := &logSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/logs" || r.Header.Get("Content-Encoding") != "gzip" {
			http.Error(w, "want a gzipped POST /logs", http.StatusBadRequest)
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var batch []map[string]any
		if err := json.NewDecoder(zr).Decode(&batch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.events = append(s.events, batch...)
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *logSink) byID() map[string]map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]any{}
	for _, ev := range s.events {
		if id, _ := ev["decision_id"].(string); id != "" {
			out[id] = ev
		}
	}
	return out
}

// policyGateway is a gateway started from a configuration file, with a
// client for its API.
type policyGateway struct {
	t      *testing.T
	base   string
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuf
	stdout *syncBuf
}

func startPolicyGateway(t *testing.T, tmp, config string) *policyGateway {
	t.Helper()
	conf := filepath.Join(tmp, "gateway.yaml")
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &policyGateway{t: t, done: make(chan error, 1), logs: &syncBuf{}, stdout: &syncBuf{}}
	var ctx context.Context
	ctx, g.cancel = context.WithCancel(context.Background())
	go func() {
		g.done <- run(ctx, []string{"--config", conf, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(tmp, "data")}, noEnv, g.stdout, g.logs)
	}()
	g.base = waitBanner(t, g.stdout, g.logs, g.done)
	t.Cleanup(func() { g.stop() })
	return g
}

func (g *policyGateway) stop() {
	if g.cancel == nil {
		return
	}
	g.cancel()
	g.cancel = nil
	select {
	case err := <-g.done:
		if err != nil {
			g.t.Errorf("shutdown: %v", err)
		}
	case <-time.After(60 * time.Second):
		g.t.Error("the gateway did not stop")
	}
}

func (g *policyGateway) call(method, path, tok, body string) (int, map[string]any, string) {
	g.t.Helper()
	req, _ := http.NewRequest(method, g.base+path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return res.StatusCode, out, string(raw)
}

const (
	agentA      = "agent-a-secret-0123456789abcdef"
	agentW      = "agent-w-secret-0123456789abcdef"
	adminSecret = "admin-secret-0123456789abcdef01"
	// opaToken is the bearer token of the decision-log service in
	// opa_config: it must appear in no output.
	opaToken = "opa-service-token-0123456789abcdef"
)

func chmodTraversable(t *testing.T, tmp string) {
	for _, d := range []string{filepath.Dir(tmp), tmp} { // the sandbox uid must traverse them
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPolicyModesShadowAndDecisionLog runs a gateway whose policy puts
// risk.critical in dryrun everywhere and tenant team-w in warn mode,
// beside a shadow policy that enforces everything, with decision logs
// going to a loopback OPA /logs receiver:
//   - the dryrun rule lets a CRITICAL request run; the answer and the audit
//     record show the would-be deny and the dryrun reason;
//   - the warn tenant's HIGH request runs and the agent is told;
//   - a SAFE request is decided as by the default policy (no would_be);
//   - the shadow counts the disagreement on live traffic, under the
//     decision_id of the audit record, and changes no outcome;
//   - /readyz and the metrics show the revision in force;
//   - after shutdown, every audit record's decision_id is in the log, with
//     the same would_be, and the service's token is in no output.
func TestPolicyModesShadowAndDecisionLog(t *testing.T) {
	tmp := t.TempDir()
	chmodTraversable(t, tmp)
	active, shadow := filepath.Join(tmp, "policy"), filepath.Join(tmp, "candidate")
	writePolicyTree(t, active, map[string]string{
		"sandgate/config/enforcement/data.json": `{"rules": {"risk.critical": "dryrun"}, "tenants": {"team-w": "warn"}}`,
	})
	writePolicyTree(t, shadow, nil)
	sink := newLogSink(t)
	g := startPolicyGateway(t, tmp, fmt.Sprintf(`log: {level: debug}
executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}
browser: {enabled: false}
auth:
  tokens:
    - {name: a, role: agent, tenant: team-a, token: %s}
    - {name: w, role: agent, tenant: team-w, token: %s}
    - {name: ops, role: admin, token: %s}
policy:
  eval_timeout: 10s
  dir: %s
  shadow_dir: %s
  opa_config:
    services:
      sink:
        url: %s
        credentials: {bearer: {token: %s}}
    decision_logs:
      service: sink
      reporting: {min_delay_seconds: 1, max_delay_seconds: 2}
`, agentA, agentW, adminSecret, active, shadow, sink.srv.URL, opaToken))

	runCode := func(tok, session, code string) map[string]any {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"code": code, "language": "python"})
		st, out, raw := g.call("POST", "/v1/sessions/"+session+"/run_code", tok, string(body))
		if st != 200 {
			t.Fatalf("run %q: %d %s", code, st, raw)
		}
		return out
	}
	decisionOf := func(out map[string]any) map[string]any { return out["decision"].(map[string]any) }

	critical := runCode(agentA, "dry", `print("rm -rf /")`)
	d := decisionOf(critical)
	if critical["stdout"] != "rm -rf /\n" || d["action"] != "allow" || d["would_be"] != "deny" || d["warnings"] != nil {
		t.Fatalf("dryrun run: %v", critical)
	}
	if !hasReason(d["reasons"], "risk.critical", "dryrun") {
		t.Fatalf("dryrun run's reasons: %v", d["reasons"])
	}
	warned := runCode(agentW, "warn", "import subprocess\nprint(1)")
	d = decisionOf(warned)
	w, _ := d["warnings"].([]any)
	if warned["stdout"] != "1\n" || d["action"] != "allow" || d["would_be"] != "require_approval" || len(w) != 1 ||
		w[0].(map[string]any)["code"] != "risk.high" || w[0].(map[string]any)["enforcement"] != "warn" {
		t.Fatalf("warn run: %v", warned)
	}
	safe := runCode(agentA, "plain", "print(6*7)")
	if d := decisionOf(safe); safe["stdout"] != "42\n" || d["action"] != "allow" || d["would_be"] != nil || d["warnings"] != nil {
		t.Fatalf("SAFE run: %v", safe)
	}

	// The audit records carry the decisions' ids and would-be actions.
	_, out, raw := g.call("GET", "/v1/audit?kind=run_code", adminSecret, "")
	recs, _ := out["records"].([]any)
	if len(recs) != 3 {
		t.Fatalf("audit: %s", raw)
	}
	byID := map[string]map[string]any{}
	for _, r := range recs {
		rec := r.(map[string]any)
		id, _ := rec["decision_id"].(string)
		if id == "" {
			t.Fatalf("audit record without decision_id: %v", rec)
		}
		byID[id] = rec
	}
	for _, c := range []struct {
		out     map[string]any
		wouldBe any
		outcome string
	}{{critical, "deny", "ok"}, {warned, "require_approval", "ok"}, {safe, nil, "ok"}} {
		id := decisionOf(c.out)["decision_id"].(string)
		rec := byID[id]
		if rec == nil || rec["would_be"] != c.wouldBe || rec["action"] != "allow" || rec["outcome"] != c.outcome {
			t.Fatalf("audit record of decision %s: %v, want would_be %v", id, rec, c.wouldBe)
		}
		if st, page, _ := g.call("GET", "/v1/audit?decision_id="+id, adminSecret, ""); st != 200 || len(page["records"].([]any)) != 1 {
			t.Fatalf("GET /v1/audit?decision_id=%s: %d %v", id, st, page)
		}
	}

	// The shadow enforces what the active policy dry-runs or warns about:
	// two disagreements, named by the runs' decision_ids.
	st, sh, raw := g.call("GET", "/v1/policy/shadow", adminSecret, "")
	if st != 200 {
		t.Fatalf("shadow: %d %s", st, raw)
	}
	const execPath = "sandgate/exec/decision"
	recent, _ := sh["recent"].([]any)
	if sh["evaluated"].(map[string]any)[execPath] != 3.0 || sh["disagreements"].(map[string]any)[execPath] != 2.0 || len(recent) != 2 {
		t.Fatalf("shadow status: %s", raw)
	}
	for i, c := range []struct {
		out  map[string]any
		want string
	}{{critical, "deny"}, {warned, "require_approval"}} {
		if r := recent[i].(map[string]any); r["decision_id"] != decisionOf(c.out)["decision_id"] ||
			r["candidate"].(map[string]any)["action"] != c.want || r["active"].(map[string]any)["action"] != "allow" {
			t.Fatalf("shadow disagreement %d: %v, want the candidate's %s", i, r, c.want)
		}
	}
	st, ready, raw := g.call("GET", "/readyz", "", "")
	rev, _ := ready["policy"].(map[string]any)["revision"].(string)
	if st != 200 || !strings.HasPrefix(rev, "sha256:") {
		t.Fatalf("readyz: %d %s", st, raw)
	}
	_, _, metrics := g.call("GET", "/metrics", adminSecret, "")
	for _, want := range []string{
		fmt.Sprintf(`sandgate_policy_info{revision=%q,source=%q} 1`, rev, active),
		`sandgate_policy_shadow_disagreements_total{path="sandgate/exec/decision"} 2`,
		`sandgate_policy_shadow_evaluations_total{path="sandgate/exec/decision"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// Shutdown flushes the decision log: every audit record's decision
	// is there, with the would-be action the record shows.
	g.stop()
	logged := sink.byID()
	for id, rec := range byID {
		ev := logged[id]
		if ev == nil {
			t.Errorf("decision %s of audit record %v is not in the decision log (%d events)", id, rec["id"], len(logged))
			continue
		}
		res, _ := ev["result"].(map[string]any)
		if ev["path"] != execPath || res["would_be"] != rec["would_be"] {
			t.Errorf("decision-log event %s: path %v result %v, want would_be %v", id, ev["path"], res, rec["would_be"])
		}
	}
	for name, s := range map[string]string{"logs": g.logs.String(), "stdout": g.stdout.String()} {
		if strings.Contains(s, opaToken) {
			t.Errorf("the decision-log service's token appears in the %s", name)
		}
	}
}

func hasReason(v any, code, enforcement string) bool {
	rs, _ := v.([]any)
	for _, r := range rs {
		m, _ := r.(map[string]any)
		if m["code"] == code && m["enforcement"] == enforcement {
			return true
		}
	}
	return false
}

// TestPolicyConfig: opa_config as a file path or an inline mapping, the
// source's combinations refused in one report, the defaults the gateway
// gives OPA (persistence under data_dir, the replica as instance id), and
// the document never printed.
func TestPolicyConfig(t *testing.T) {
	tmp := t.TempDir()
	opaFile := filepath.Join(tmp, "opa.yaml")
	if err := os.WriteFile(opaFile, []byte("services: {s: {url: 'http://127.0.0.1:1'}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
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
	if _, err := load(`policy:
  source: bundle
  opa_config:
    services: {hub: {url: "https://bundles.example"}}
    bundles: {sandgate: {service: hub, resource: bundles/sandgate.tar.gz}}
`); err == nil || !strings.Contains(err.Error(), `bundle "sandgate" has no signing.keyid`) {
		t.Errorf("an unsigned bundle was accepted: %v", err)
	}
	cfg, err := load(`policy:
  source: bundle
  allow_unsigned_bundles: true
  opa_config:
    services: {hub: {url: "https://bundles.example", credentials: {bearer: {token: s3cret}}}}
    bundles: {sandgate: {service: hub, resource: bundles/sandgate.tar.gz, persist: true}}
`)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := policyOptions(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Source != policy.SourceBundle || !bytes.Contains(opts.OPAConfig, []byte("s3cret")) ||
		opts.PersistDir != filepath.Join(cfg.DataDir, "opa") || opts.InstanceID != "local" {
		t.Fatalf("options: %+v", opts)
	}
	for _, s := range []string{fmt.Sprint(cfg.Policy), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg.Policy.OPAConfig)} {
		if strings.Contains(s, "s3cret") {
			t.Fatalf("opa_config printed: %s", s)
		}
	}
	cfg, err = load("storage: {replica: r2}\npolicy: {opa_config: " + opaFile + ", instance_id: ''}\n")
	if err != nil {
		t.Fatal(err)
	}
	if opts, err = policyOptions(cfg, nil); err != nil || !bytes.Contains(opts.OPAConfig, []byte("127.0.0.1:1")) || opts.InstanceID != "r2" {
		t.Fatalf("file opa_config: %+v %v", opts, err)
	}
	if opts, _ := policyOptions(Default(), nil); opts.OPAConfig != nil || opts.PersistDir != "" || opts.InstanceID != "" {
		t.Fatalf("no opa_config: %+v", opts)
	}
	_, err = load("policy: {source: bundle, dir: /etc/x}\n")
	for _, want := range []string{"policy.source bundle needs policy.opa_config", "policy.dir is set but policy.source is bundle"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want %q", err, want)
		}
	}
	if _, err = load("policy: {source: git}\n"); err == nil || !strings.Contains(err.Error(), `policy.source "git"`) {
		t.Errorf("unknown source: %v", err)
	}
	if _, err = load("policy: {opa_config: " + filepath.Join(tmp, "absent.yaml") + "}\n"); err == nil || !strings.Contains(err.Error(), "policy.opa_config") {
		t.Errorf("missing opa_config file: %v", err)
	}
	if _, err = load("policy: {opa_config: [1, 2]}\n"); err == nil || !strings.Contains(err.Error(), "want a file path or a mapping") {
		t.Errorf("opa_config list: %v", err)
	}
}

// buildTestBundle is `opa build --bundle DIR --revision REV` with the
// OPA CLI this module pins (policytest.OPABuild): an unsigned bundle.
func buildTestBundle(t *testing.T, dir, revision string) []byte {
	t.Helper()
	return policytest.OPABuild(t, dir, revision, "", "")
}

// TestPolicyFromBundle: a gateway with policy.source bundle activates the
// bundle a loopback service serves, shows its revision in /readyz,
// GET /v1/policy and the metrics, answers a reload 409, and keeps the
// last good revision when the next bundle does not compile, saying so in
// /readyz without the compile text.
func TestPolicyFromBundle(t *testing.T) {
	tmp := t.TempDir()
	chmodTraversable(t, tmp)
	good, bad := filepath.Join(tmp, "good"), filepath.Join(tmp, "bad")
	writePolicyTree(t, good, nil)
	writePolicyTree(t, bad, map[string]string{"sandgate/exec/broken.rego": "package sandgate.exec\n\nbroken if input.request.no_such_field == 1\n"})
	for _, d := range []string{good, bad} { // an administrator's bundle leaves the tests out
		_ = filepath.WalkDir(d, func(p string, _ os.DirEntry, _ error) error {
			if strings.HasSuffix(p, "_test.rego") {
				return os.Remove(p)
			}
			return nil
		})
	}
	var mu sync.Mutex
	served := buildTestBundle(t, good, "rev-1")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b := served
		mu.Unlock()
		if r.URL.Path != "/bundles/sandgate.tar.gz" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	g := startPolicyGateway(t, tmp, fmt.Sprintf(`executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}
browser: {enabled: false}
auth:
  tokens:
    - {name: a, role: agent, tenant: team-a, token: %s}
    - {name: ops, role: admin, token: %s}
storage: {replica: replica-1}
policy:
  eval_timeout: 10s
  source: bundle
  allow_unsigned_bundles: true # the test's loopback bundle service serves unsigned bundles
  opa_config:
    services: {hub: {url: %s}}
    bundles:
      sandgate: {service: hub, resource: bundles/sandgate.tar.gz, persist: true, polling: {min_delay_seconds: 1, max_delay_seconds: 1}}
`, agentA, adminSecret, srv.URL))

	ready := func() (int, map[string]any, string) {
		st, out, raw := g.call("GET", "/readyz", "", "")
		p, _ := out["policy"].(map[string]any)
		return st, p, raw
	}
	deadline := time.Now().Add(30 * time.Second)
	var p map[string]any
	for {
		var st int
		var raw string
		st, p, raw = ready()
		if st == 200 && p["bundles"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz never ready on the bundle: %d %s", st, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b := p["bundles"].(map[string]any)["sandgate"].(map[string]any)
	rev, _ := p["revision"].(string)
	if b["active_revision"] != "rev-1" || p["source"] != "bundle" || rev == "" {
		t.Fatalf("readyz policy: %v", p)
	}
	if st, out, raw := g.call("POST", "/v1/sessions/s/run_code", agentA, `{"code":"print(6*7)","language":"python"}`); st != 200 || out["stdout"] != "42\n" {
		t.Fatalf("run on the bundle's policy: %d %s", st, raw)
	}
	if st, out, raw := g.call("POST", "/v1/policy/reload", adminSecret, ""); st != 409 || out["error"].(map[string]any)["code"] != "conflict" {
		t.Fatalf("reload of a bundle source: %d %s", st, raw)
	}
	_, _, metrics := g.call("GET", "/metrics", adminSecret, "")
	for _, want := range []string{`sandgate_policy_bundle_info{bundle="sandgate",revision="rev-1"} 1`, `sandgate_policy_bundle_error{bundle="sandgate"} 0`,
		fmt.Sprintf(`sandgate_policy_info{revision=%q,source="bundle"} 1`, rev)} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "data", "opa", "bundles", "sandgate")); err != nil {
		t.Errorf("the bundle is not persisted under data_dir/opa: %v", err)
	}

	mu.Lock()
	served = buildTestBundle(t, bad, "rev-2")
	mu.Unlock()
	deadline = time.Now().Add(30 * time.Second)
	for {
		st, p, raw := ready()
		b := p["bundles"].(map[string]any)["sandgate"].(map[string]any)
		if b["code"] == "bundle_error" {
			if st != 200 || b["active_revision"] != "rev-1" || p["revision"] != rev || p["last_error"] == nil ||
				strings.Contains(raw, "no_such_field") || strings.Contains(raw, "broken.rego") {
				t.Fatalf("readyz after a refused bundle: %d %s", st, raw)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broken bundle was never refused: %s", raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, out, raw := g.call("GET", "/v1/policy", adminSecret, ""); !strings.Contains(fmt.Sprint(out["last_error"]), "no_such_field") {
		t.Fatalf("GET /v1/policy does not say why: %s", raw)
	}
}
