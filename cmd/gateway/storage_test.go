package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/pgtest"
)

// TestGatewayOnPostgres starts the gateway with storage.driver postgres,
// the DSN (with its password) in SANDGATE_STORAGE_DSN as an operator would
// pass it: a run is audited in PostgreSQL and read back through
// GET /v1/audit, /readyz reports the database, and the password appears
// nowhere in the logs or the banner.
func TestGatewayOnPostgres(t *testing.T) {
	dsn := pgtest.Schema(t)
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(tmp, "gateway.yaml")
	yaml := "log: {level: debug}\nexecutors: {docker: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\nstorage: {driver: postgres}\n" +
		testPolicyYAML
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	const agent, admin = "agent-secret-0123456789abcdef", "admin-secret-0123456789abcdef"
	env := map[string]string{"SANDGATE_STORAGE_DSN": dsn, "SANDGATE_AGENT_TOKEN": agent, "SANDGATE_ADMIN_TOKEN": admin}
	var stdout, logs syncBuf
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--config", conf, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(tmp, "data")},
			func(k string) string { return env[k] }, &stdout, &logs)
	}()
	base := waitBanner(t, &stdout, &logs, done)
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
	if st, out := call("POST", "/v1/sessions/pg/run_code", agent, `{"code":"print(6*7)","language":"python"}`); st != 200 || out["stdout"] != "42\n" {
		t.Fatalf("run_code: %d %v", st, out)
	}
	_, out := call("GET", "/v1/audit?session_id=pg", admin, "")
	if recs, _ := out["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["outcome"] != "ok" {
		t.Fatalf("audit from postgres: %v", out)
	}
	if st, out := call("GET", "/readyz", "", ""); out["database"] != "ok" {
		t.Fatalf("readyz: %d %v", st, out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	pw := ""
	for _, f := range strings.Fields(dsn) {
		if v, ok := strings.CutPrefix(f, "password="); ok {
			pw = v
		}
	}
	if pw == "" {
		t.Fatal("the test cluster's DSN has no password")
	}
	if strings.Contains(logs.String(), pw) || strings.Contains(stdout.String(), pw) {
		t.Error("the database password appears in the output")
	}
	if !strings.Contains(logs.String(), `"driver":"postgres"`) {
		t.Errorf("no postgres open in the logs: %s", logs.String())
	}
}

// TestFleetRefusesUnsharedWorkspaces: a replica whose workspace root is not
// the one the fleet's first replica marked refuses to start.
func TestFleetRefusesUnsharedWorkspaces(t *testing.T) {
	dsn := pgtest.Schema(t)
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(tmp, "gateway.yaml")
	yaml := "executors: {docker: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\nstorage: {driver: postgres, lease: 1s}\n"
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(replica, data string) (context.CancelFunc, chan error, *syncBuf, *syncBuf) {
		env := map[string]string{"SANDGATE_STORAGE_DSN": dsn, "SANDGATE_REPLICA": replica}
		var stdout, logs syncBuf
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"--config", conf, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(tmp, data)},
				func(k string) string { return env[k] }, &stdout, &logs)
		}()
		return cancel, done, &stdout, &logs
	}
	cancel, done, stdout, logs := start("a", "shared")
	waitBanner(t, stdout, logs, done)
	defer func() { cancel(); <-done }()
	cancelB, doneB, _, _ := start("b", "elsewhere")
	defer cancelB()
	if err := <-doneB; err == nil || !strings.Contains(err.Error(), "not shared") {
		t.Fatalf("replica b on its own workspace root: %v, want a refusal", err)
	}
}
