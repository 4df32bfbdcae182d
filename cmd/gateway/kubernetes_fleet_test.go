package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/fleet"
	"github.com/sandgate/sandgate/internal/pgtest"
)

// TestKubernetesFleetOneSession: three gateway processes on one
// PostgreSQL database, each with a data directory of its own (no shared
// workspace mount), all on the Kubernetes tier, are driven round-robin
// on one session. Every run sees what the runs before it wrote, whichever
// replica got it, and the session has exactly one pod throughout. Then a
// replica that does not serve the session is killed with SIGKILL, and
// then the one that does: the session goes on, on the same pod with its
// state, served by a survivor that adopts it.
func TestKubernetesFleetOneSession(t *testing.T) {
	kubeconfig, image := kubeTestCluster(t)
	dsn := pgtest.Schema(t)
	tmp := t.TempDir()
	chmodTraversable(t, tmp)
	policyDir := filepath.Join(tmp, "policy")
	writePolicyTree(t, policyDir, map[string]string{"sandgate/config/data.json": routeAllTo(t, "kubernetes")})
	ns := "sandgate-fleet-" + executortest.Nonce()
	tok := "agent-" + executortest.Nonce()
	conf := filepath.Join(tmp, "fleet.yaml")
	yaml := fmt.Sprintf(`executors:
  subprocess: {enabled: false}
  docker: {enabled: false}
  gvisor: {enabled: false}
  aio: {enabled: false}
  kubernetes: {enabled: true, kubeconfig: %q, namespace: %q, image: %q, image_pull_policy: Never, pod_memory_mb: 512, pod_cpu: 100m, pool: {size: 1}}
browser: {enabled: false}
storage: {driver: postgres}
auth:
  tokens:
    - {name: a, role: agent, tenant: team-a, token: %s}
`, kubeconfig, ns, image, tok) + testPolicyYAML
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cs := kubeClient(t, kubeconfig)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	bin := gatewayBinary(t)
	names := []string{"a", "b", "c"}
	bases, cmds := map[string]string{}, map[string]*exec.Cmd{}
	for _, r := range names {
		data := filepath.Join(tmp, "data-"+r)
		if r != "a" {
			// The fleet's check that every replica mounts one workspace
			// root (fleet.CheckShared) is for the tiers whose state is on
			// the replica; these directories are distinct, and the
			// marker is copied so that the check passes.
			copyMarker(t, filepath.Join(tmp, "data-a", "workspaces"), filepath.Join(data, "workspaces"))
		}
		cmd := exec.Command(bin, "--config", conf, "--listen", "127.0.0.1:0", "--data-dir", data, "--policy-dir", policyDir)
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDGATE_STORAGE_DSN=" + dsn, "SANDGATE_REPLICA=" + r}
		base, logs := startAndWait(t, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("replica %s logs:\n%s", r, logs.String())
			}
		})
		bases[r], cmds[r] = base, cmd
	}
	dead := map[string]bool{}
	next, lines := 0, 0
	var podUID string
	// step sends one run to the next live replica in turn: it appends a
	// line to the session's file and counts the lines.
	step := func() {
		t.Helper()
		for dead[names[next%3]] {
			next++
		}
		r := names[next%3]
		next++
		lines++
		st, out := fleetRun(t, bases[r], tok, "echo "+r+" >> log.txt; wc -l < log.txt")
		if st != 200 || strings.TrimSpace(fmt.Sprint(out["stdout"])) != fmt.Sprint(lines) {
			t.Fatalf("run %d through %s: %d %v, want the count %d (the session's state)", lines, r, st, out, lines)
		}
		uid := onlySessionPod(t, cs, ns)
		if podUID == "" {
			podUID = uid
		} else if uid != podUID {
			t.Fatalf("run %d through %s: the session's pod is %s, was %s", lines, r, uid, podUID)
		}
	}
	for range 6 {
		step()
	}
	owner := pgtest.QueryString(t, dsn, `SELECT replica FROM sessions WHERE key LIKE '%~k8s-fleet'`)
	var other string
	for _, r := range names {
		if r != owner {
			other = r
			break
		}
	}
	kill9(t, cmds[other])
	dead[other] = true
	for range 4 {
		step()
	}
	kill9(t, cmds[owner])
	dead[owner] = true
	began := time.Now()
	step() // waits for the owner's lease to expire, then adopted
	t.Logf("the session adopted %v after its replica's SIGKILL", time.Since(began).Round(time.Millisecond))
	for range 3 {
		step()
	}
	var alive string
	for _, r := range names {
		if !dead[r] {
			alive = r
		}
	}
	if st, out := fleetCall(t, "DELETE", bases[alive]+"/v1/sessions/k8s-fleet", tok, ""); st/100 != 2 {
		t.Fatalf("delete the session: %d %v", st, out)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "sandgate.dev/session"})
		if err == nil && len(l.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session's pod outlived the session by a minute")
		}
	}
}

func fleetRun(t *testing.T, base, tok, code string) (int, map[string]any) {
	body, _ := json.Marshal(map[string]any{"language": "bash", "code": code})
	return fleetCall(t, "POST", base+"/v1/sessions/k8s-fleet/run_code", tok, string(body))
}

func fleetCall(t *testing.T, method, url, tok, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		out = map[string]any{"raw": string(raw)}
	}
	return res.StatusCode, out
}

// onlySessionPod is the uid of the one pod labelled with a session in
// ns (pool pods carry no session label until claimed).
func onlySessionPod(t *testing.T, cs kubernetes.Interface, ns string) string {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "sandgate.dev/session"})
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, string(p.UID))
		}
	}
	if len(live) != 1 {
		t.Fatalf("session pods: %v, want exactly one", live)
	}
	return live[0]
}

func kill9(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

func copyMarker(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(from, fleet.MarkerFile))
	if err == nil {
		err = os.MkdirAll(to, 0o711)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(to, fleet.MarkerFile), b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}
