package main

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/confirm/slacktest"
	"github.com/sandgate/sandgate/policy"
)

// strictSubprocessPolicy writes the embedded policy to dir with STRICT's
// HIGH approvals routed to the subprocess executor (and no isolation
// upgrade), so an approved run really runs without Docker.
func strictSubprocessPolicy(t *testing.T, dir string) string {
	t.Helper()
	err := fs.WalkDir(policy.DefaultFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(policy.DefaultFS(), p)
		if err != nil {
			return err
		}
		if p == "sandgate/config/data.json" {
			var data map[string]any
			if err := json.Unmarshal(b, &data); err != nil {
				return err
			}
			data["modes"].(map[string]any)["STRICT"].(map[string]any)["HIGH"].(map[string]any)["executor"] = "subprocess"
			data["isolation_upgrade"].(map[string]any)["modes"] = []string{} // no gVisor upgrade either
			if b, err = json.Marshal(data); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSlackChannelFromTheGateway: `gateway --config` with a Slack channel
// configured in approval.channels (token and signing secret from the
// environment): a HIGH request in STRICT is posted to the stand-in Slack,
// a badly signed and an unmapped user's callback are refused, a mapped
// user's signed click on /v1/channels/slack/callback approves it, the run
// returns 200 decided by that user, and the message is rewritten.
func TestSlackChannelFromTheGateway(t *testing.T) {
	sl := slacktest.New(t)
	tmp := t.TempDir()
	chmodTraversable(t, tmp)
	pol := strictSubprocessPolicy(t, filepath.Join(tmp, "policy"))
	config := "mode: STRICT\nexecutors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\n" +
		"policy: {dir: " + pol + "}\n" +
		"approval:\n  timeout: 60s\n  page_url: https://gate.example.com\n  channels:\n" +
		"    - name: slack\n      type: slack\n      risk_levels: [HIGH]\n      slack:\n" +
		"        channel: " + sl.Channels[0] + "\n        api_url: " + sl.APIURL() + "\n" +
		"        bot_token_env: SLACK_BOT_TOKEN\n        signing_secret_env: SLACK_SIGNING_SECRET\n" +
		"        users: {U0ALICE: alice}\n"
	conf := filepath.Join(tmp, "gateway.yaml")
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLACK_BOT_TOKEN": sl.Token, "SLACK_SIGNING_SECRET": sl.SigningSecret,
		"SANDGATE_AGENT_TOKEN": agentA, "SANDGATE_ADMIN_TOKEN": adminSecret}
	stdout, logs := &syncBuf{}, &syncBuf{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--config", conf, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(tmp, "data")},
			func(k string) string { return env[k] }, stdout, logs)
	}()
	base := waitBanner(t, stdout, logs, done)
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("the gateway did not stop")
		}
	})

	type result struct {
		status int
		body   map[string]any
	}
	res := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", base+"/v1/sessions/slacked/run_code", strings.NewReader(
			`{"language":"python","code":"import subprocess\nprint(subprocess.run(['echo','hi'],capture_output=True).stdout.decode())"}`))
		req.Header.Set("Authorization", "Bearer "+agentA)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- result{}
			return
		}
		defer r.Body.Close()
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		res <- result{r.StatusCode, body}
	}()
	var m slacktest.Message
	sl.Wait(t, 30*time.Second, "the post", func(ms []slacktest.Message) bool {
		if len(ms) > 0 {
			m = ms[0]
		}
		return len(ms) == 1
	})
	callback := base + "/v1/channels/slack/callback"
	for _, c := range []struct {
		click slacktest.Click
		want  int
	}{
		{slacktest.Click{UserID: "U0ALICE", ActionID: "approve", BadSignature: true}, 401},
		{slacktest.Click{UserID: "U0MALLORY", ActionID: "approve"}, 403},
		{slacktest.Click{UserID: "U0ALICE", ActionID: "approve"}, 200},
	} {
		c.click.Message = m
		if st, err := sl.Send(callback, c.click); err != nil || st != c.want {
			t.Fatalf("click %+v: %d %v, want %d", c.click.UserID, st, err, c.want)
		}
	}
	var r result
	select {
	case r = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not return")
	}
	appr, _ := r.body["approval"].(map[string]any)
	if r.status != 200 || appr["decided_by"] != "alice" {
		t.Fatalf("run: %d %v", r.status, r.body)
	}
	sl.Wait(t, 10*time.Second, "the update", func(ms []slacktest.Message) bool {
		return ms[0].Updates > 0 && strings.Contains(ms[0].Text, "approved by alice")
	})
	if strings.Contains(logs.String(), sl.Token) || strings.Contains(logs.String(), sl.SigningSecret) {
		t.Error("the logs carry the bot token or the signing secret")
	}
}
