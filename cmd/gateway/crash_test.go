package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/pgtest"
)

// TestKillDuringRunLeavesInterruptedRecord is the crash the issue reports:
// the gateway is killed with SIGKILL while a run_code executes. The
// write-ahead record is there as "started" while it runs, becomes
// "interrupted" when the gateway starts again, and `gateway audit verify`
// passes; then one edited row makes verify fail naming it. On both drivers.
func TestKillDuringRunLeavesInterruptedRecord(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bin := gatewayBinary(t)
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			data := filepath.Join(dir, driver)
			// On postgres, the restart waits out the killed process's
			// lease, kept short (1 s). The restart's own lease is longer:
			// it waits for the old one up to twice its own (fleet.Register),
			// and 2 s left a loaded machine little room.
			conf, restartConf := filepath.Join(dir, driver+".yaml"), filepath.Join(dir, driver+"-restart.yaml")
			writeConf := func(path, lease string) {
				storage := "{driver: sqlite}"
				if driver == "postgres" {
					storage = "{driver: postgres, lease: " + lease + "}"
				}
				yaml := "executors: {docker: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\nstorage: " + storage + "\n" +
					testPolicyYAML
				if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			writeConf(conf, "1s")
			writeConf(restartConf, "10s")
			env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDGATE_AGENT_TOKEN=agent-crash-token-0123456",
				"SANDGATE_ADMIN_TOKEN=admin-crash-token-0123456", "SANDGATE_REPLICA=crash-a"}
			var tamper func(stmt string)
			if driver == "postgres" {
				dsn := pgtest.Schema(t)
				env = append(env, "SANDGATE_STORAGE_DSN="+dsn)
				tamper = func(stmt string) {
					pgtest.Exec(t, dsn, `ALTER TABLE records DISABLE TRIGGER USER`)
					pgtest.Exec(t, dsn, stmt)
				}
			} else {
				tamper = func(stmt string) { tamperSQLite(t, filepath.Join(data, "audit", "audit.db"), stmt) }
			}
			args := []string{"--listen", "127.0.0.1:0", "--mode", "PERMISSIVE", "--data-dir", data}
			start := func(conf string) (*exec.Cmd, string) {
				cmd := exec.Command(bin, append([]string{"--config", conf}, args...)...)
				cmd.Env = env
				base, logs := startAndWait(t, cmd)
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("gateway logs:\n%s", logs.String())
					}
				})
				return cmd, base
			}
			cmd, base := start(conf)
			go func() {
				body := `{"code":"import time\ntime.sleep(20)\nprint('done')","language":"python"}`
				req, _ := http.NewRequest("POST", base+"/v1/sessions/crash/run_code", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer agent-crash-token-0123456")
				if res, err := http.DefaultClient.Do(req); err == nil {
					res.Body.Close()
				}
			}()
			var started map[string]any
			deadline := time.Now().Add(20 * time.Second)
			for started == nil {
				if time.Now().After(deadline) {
					t.Fatal("no started record while the run executes")
				}
				time.Sleep(50 * time.Millisecond)
				if recs := auditRecords(t, base); len(recs) == 1 && recs[0]["outcome"] == "started" {
					started = recs[0]
				}
			}
			if started["action"] != "allow" || started["executor"] != "subprocess" {
				t.Fatalf("started record lacks the decision: %v", started)
			}
			if err := cmd.Process.Kill(); err != nil { // kill -9
				t.Fatal(err)
			}
			_ = cmd.Wait()

			cmd, base = start(restartConf)
			recs := auditRecords(t, base)
			if len(recs) != 1 || recs[0]["id"] != started["id"] || recs[0]["outcome"] != "interrupted" {
				t.Fatalf("after the restart: %v, want record %v interrupted", recs, started["id"])
			}
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()

			verify := func() (string, error) {
				c := exec.Command(bin, append([]string{"audit", "verify", "--config", conf}, args...)...)
				c.Env = env
				out, err := c.CombinedOutput()
				return string(out), err
			}
			if out, err := verify(); err != nil {
				t.Fatalf("verify of an intact log: %v\n%s", err, out)
			}
			id := int64(started["id"].(float64))
			tamper(fmt.Sprintf(`UPDATE records SET outcome = 'ok', exit_code = 0 WHERE id = %d`, id))
			out, err := verify()
			if err == nil || !strings.Contains(out, fmt.Sprintf(`replica "crash-a": record %d:`, id)) {
				t.Fatalf("verify after editing record %d: %v\n%s", id, err, out)
			}
			t.Logf("verify: %s", out[strings.Index(out, "sandgate:"):])
		})
	}
}

func auditRecords(t *testing.T, base string) []map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/audit?session_id=crash", nil)
	req.Header.Set("Authorization", "Bearer admin-crash-token-0123456")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var page struct {
		Records []map[string]any `json:"records"`
	}
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	return page.Records
}

// tamperSQLite edits the database file as someone with access to it would:
// the triggers are dropped first.
func tamperSQLite(t *testing.T, path, stmt string) {
	t.Helper()
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, s := range []string{`DROP TRIGGER records_no_update`, stmt} {
		if _, err := raw.ExecContext(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
