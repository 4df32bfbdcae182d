package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// receiver is a Standard Webhooks endpoint: it verifies each delivery as
// the specification says (HMAC-SHA256 of "id.timestamp.body" with the
// base64-decoded secret, "v1," and the base64 signature among the
// space-separated signatures) and refuses with 503 while down.
type receiver struct {
	key  []byte
	down atomic.Bool

	mu       sync.Mutex
	byID     map[string][]byte // webhook-id → body (a redelivery must match)
	events   map[int64]string  // event id → type
	bad      []string
	attempts int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.attempts++
	if rc.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	mac := hmac.New(sha256.New, rc.key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	sec, err := strconv.ParseInt(ts, 10, 64)
	ok := err == nil && time.Since(time.Unix(sec, 0)).Abs() < 5*time.Minute
	found := false
	for _, s := range strings.Fields(r.Header.Get("webhook-signature")) {
		found = found || hmac.Equal([]byte(s), []byte(want))
	}
	if !ok || !found {
		rc.bad = append(rc.bad, "bad signature on "+id)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if prev, seen := rc.byID[id]; seen && string(prev) != string(body) {
		rc.bad = append(rc.bad, "webhook-id "+id+" redelivered with another body")
	}
	rc.byID[id] = body
	var ev struct {
		ID   int64  `json:"id"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		rc.bad = append(rc.bad, "not an event: "+string(body))
	}
	rc.events[ev.ID] = ev.Type
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) snapshot() (map[int64]string, []string, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ev := make(map[int64]string, len(rc.events))
	for k, v := range rc.events {
		ev[k] = v
	}
	return ev, append([]string(nil), rc.bad...), rc.attempts
}

// TestWebhooksFromTheGateway: a gateway with a webhook delivers every
// lifecycle event of its runs, signed; while the receiver is down it
// keeps them, across a gateway restart, and delivers all of them once
// the receiver is back, in order of their ids and without a gap.
func TestWebhooksFromTheGateway(t *testing.T) {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	rc := &receiver{key: secret, byID: map[string][]byte{}, events: map[int64]string{}}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "gw.yaml")
	yaml := "executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\n" +
		testPolicyYAML + "events:\n  retry_max: 1s\n  webhooks:\n    - url: " + hook.URL + "\n      secret: whsec_" +
		base64.StdEncoding.EncodeToString(secret) + "\n"
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := gatewayBinary(t)
	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(bin, "--config", conf, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"))
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDGATE_AGENT_TOKEN=agent-hook-token-0123456"}
		base, _ := startAndWait(t, cmd)
		return cmd, base
	}
	run := func(base, cmd string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/sessions/hooked/execute", strings.NewReader(`{"command":"`+cmd+`"}`))
		req.Header.Set("Authorization", "Bearer agent-hook-token-0123456")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("execute: %d", res.StatusCode)
		}
	}
	cmd, base := start()
	run(base, "echo one") // session.created, run.started, run.finished
	waitUntil(t, 10*time.Second, func() bool { ev, _, _ := rc.snapshot(); return len(ev) == 3 })

	rc.down.Store(true)
	run(base, "echo two")
	_ = cmd.Process.Signal(os.Interrupt) // a restart while the receiver is down
	_ = cmd.Wait()
	_, base = start()
	run(base, "echo three")
	// The restarted gateway's retries meet the outage before it ends.
	_, _, before := rc.snapshot()
	waitUntil(t, 30*time.Second, func() bool { _, _, n := rc.snapshot(); return n >= before+2 })
	_, _, attempts := rc.snapshot()
	rc.down.Store(false)
	waitUntil(t, 20*time.Second, func() bool { ev, _, _ := rc.snapshot(); return len(ev) == 7 })
	ev, bad, _ := rc.snapshot()
	if len(bad) > 0 {
		t.Fatalf("receiver: %v", bad)
	}
	if attempts <= 3 {
		t.Fatalf("no delivery was tried during the outage (%d attempts)", attempts)
	}
	want := []string{"session.created", "run.started", "run.finished", "run.started", "run.finished", "run.started", "run.finished"}
	for i, typ := range want {
		if ev[int64(i+1)] != typ {
			t.Fatalf("event %d is %q, want %q (all: %v)", i+1, ev[int64(i+1)], typ, ev)
		}
	}
}

func waitUntil(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in " + d.String())
		}
	}
}

// TestEventStreamDoesNotHoldShutdown: a client reading GET /v1/events
// does not hold a graceful shutdown to its deadline (60 s here): its
// stream ends when the gateway stops, and the gateway exits.
func TestEventStreamDoesNotHoldShutdown(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "gw.yaml")
	yaml := "executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\nbrowser: {enabled: false}\n" +
		testPolicyYAML + "server: {shutdown_timeout: 60s}\n"
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gatewayBinary(t), "--config", conf, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDGATE_AGENT_TOKEN=agent-sse-token-01234567"}
	base, _ := startAndWait(t, cmd)
	req, _ := http.NewRequest("GET", base+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer agent-sse-token-01234567")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET /v1/events: %d", res.StatusCode)
	}
	ended := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, res.Body); close(ended) }()
	stopped := time.Now()
	_ = cmd.Process.Signal(os.Interrupt)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second): // half the shutdown deadline
		t.Fatal("the gateway did not stop while an event stream was open: the stream held the shutdown")
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the event stream did not end when the gateway stopped")
	}
	t.Logf("stopped %s after SIGINT with a stream open", time.Since(stopped).Round(time.Millisecond))
}
