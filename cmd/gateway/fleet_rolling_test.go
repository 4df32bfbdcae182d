package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rollingFleet is the running fleet rollingRestart restarts.
type rollingFleet struct {
	names []string
	bases map[string]string // start updates them
	cmds  map[string]*exec.Cmd
	start func(name string)
	agent string
	admin string
}

// balancer is the fleet's one address: round-robin over the replicas in
// rotation. A rolling deploy takes a replica out of rotation before
// stopping it, as a load balancer's deregistration does; its requests in
// flight finish, and the requests of its sessions that reach the others
// are adopted there.
type balancer struct {
	mu    sync.Mutex
	in    []string
	next  int
	picks map[string]int
}

func (b *balancer) pick() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	base := b.in[b.next%len(b.in)]
	b.next++
	b.picks[base]++
	return base
}

func (b *balancer) set(remove, add string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.in = slices.DeleteFunc(b.in, func(s string) bool { return s == remove })
	if add != "" {
		b.in = append(b.in, add)
	}
}

func (b *balancer) served(base string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.picks[base]
}

// mixedStep is one request of the mixed workload (bench's mixed
// workload: run, command, file write, edit, grep, and an intended
// denial).
type mixedStep struct {
	name, method, path, body string
	want                     int
}

var mixedSteps = []mixedStep{
	{"run_code", "POST", "run_code", `{"code":"print(1)","language":"python"}`, 200},
	{"execute", "POST", "execute", `{"command":"echo hi"}`, 200},
	{"write", "PUT", "files/content?path=notes.md", "# notes\nalpha line\n", 200},
	{"edit", "POST", "files/edit", `{"path":"notes.md","old":"alpha","new":"beta"}`, 200},
	{"grep", "GET", "files/grep?pattern=beta", "", 200},
	{"denied", "POST", "execute", `{"command":"rm -rf /"}`, 403},
}

type stepResult struct {
	step, requestID, err string
	status               int
}

// rollingRestart runs the mixed workload in 8 sessions through a
// round-robin client while a, b and c are restarted one after the other
// (SIGTERM, start again under the same name). No request may fail other
// than the intended denials, and every request must have its one
// completed audit record in the fleet's log.
func rollingRestart(t *testing.T, f rollingFleet) {
	lb := &balancer{picks: map[string]int{}}
	for _, n := range f.names {
		lb.in = append(lb.in, f.bases[n])
	}
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var (
		mu      sync.Mutex
		results []stepResult
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	for i := range 8 {
		session := fmt.Sprintf("roll-%d", i)
		wg.Go(func() {
			for {
				for _, st := range mixedSteps {
					select {
					case <-stop:
						return
					default:
					}
					r := doStep(client, lb.pick(), session, f.agent, st)
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				}
			}
		})
	}
	// Each replica in turn: out of rotation, stopped (its requests in
	// flight finish), started again, back in rotation until it has
	// served its share.
	for _, n := range f.names {
		old := f.bases[n]
		lb.set(old, "")
		t0 := time.Now()
		if err := f.cmds[n].Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := f.cmds[n].Wait(); err != nil {
			t.Fatalf("replica %s stopped with %v", n, err)
		}
		f.start(n)
		lb.set("", f.bases[n])
		t.Logf("replica %s restarted in %v", n, time.Since(t0).Round(time.Millisecond))
		for deadline := time.Now().Add(30 * time.Second); lb.served(f.bases[n]) < 30; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the restarted %s got no traffic", n)
			}
		}
	}
	close(stop)
	wg.Wait()

	counts := map[string]int{}
	var unintended []stepResult
	for _, r := range results {
		counts[r.step]++
		if r.err != "" || !wanted(r.status, stepWant(r.step)) {
			unintended = append(unintended, r)
		}
	}
	t.Logf("rolling restart: %d requests %v, %d unintended", len(results), counts, len(unintended))
	if len(unintended) > 0 {
		t.Fatalf("unintended answers (first of %d): %+v", len(unintended), unintended[0])
	}
	recs := auditByRequest(t, client, f.bases[f.names[0]], f.admin)
	for _, r := range results {
		rec, ok := recs[r.requestID]
		if !ok {
			t.Fatalf("no audit record for %s %s", r.step, r.requestID)
		}
		if want := map[bool]string{true: "ok", false: "denied"}[r.status != 403]; rec != want {
			t.Fatalf("audit record of %s %s: outcome %q, want %q", r.step, r.requestID, rec, want)
		}
	}
}

// wanted: 200 stands for any 2xx (a write that creates the file is 201).
func wanted(status, want int) bool {
	if want == http.StatusOK {
		return status/100 == 2
	}
	return status == want
}

func stepWant(name string) int {
	for _, s := range mixedSteps {
		if s.name == name {
			return s.want
		}
	}
	return 0
}

func doStep(c *http.Client, base, session, token string, st mixedStep) stepResult {
	var body io.Reader
	if st.body != "" {
		body = strings.NewReader(st.body)
	}
	req, _ := http.NewRequest(st.method, base+"/v1/sessions/"+session+"/"+st.path, body)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := c.Do(req)
	if err != nil {
		return stepResult{step: st.name, err: err.Error()}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := stepResult{step: st.name, status: res.StatusCode, requestID: res.Header.Get("X-Request-Id")}
	if !wanted(res.StatusCode, st.want) {
		r.err = fmt.Sprintf("%.300s", raw)
	}
	return r
}

// auditByRequest reads the whole audit log through one replica: the
// outcome of each request id.
func auditByRequest(t *testing.T, c *http.Client, base, admin string) map[string]string {
	t.Helper()
	out := map[string]string{}
	cursor := ""
	for {
		req, _ := http.NewRequest("GET", base+"/v1/audit?limit=1000"+cursor, nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Records []struct {
				RequestID string `json:"request_id"`
				Outcome   string `json:"outcome"`
			} `json:"records"`
			NextCursor int64 `json:"next_cursor"`
		}
		err = json.NewDecoder(res.Body).Decode(&page)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			if _, dup := out[r.RequestID]; dup {
				t.Fatalf("two audit records for request %s", r.RequestID)
			}
			out[r.RequestID] = r.Outcome
		}
		if page.NextCursor == 0 {
			return out
		}
		cursor = fmt.Sprintf("&cursor=%d", page.NextCursor)
	}
}

// streamThroughForward sends a streamed run_code of the session "fleet"
// (A's) to via, reads its events as they come, approves it on approver's
// replica once approval_pending arrives, and expects the output and exit.
func streamThroughForward(t *testing.T, via, approverBase, agent, approver string) {
	t.Helper()
	req, _ := http.NewRequest("POST", via+"/v1/sessions/fleet/run_code",
		strings.NewReader(`{"code":"import subprocess\nprint('streamed')","language":"python"}`))
	req.Header.Set("Authorization", "Bearer "+agent)
	req.Header.Set("Accept", "application/x-ndjson")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || !strings.HasPrefix(ct, "application/x-ndjson") {
		t.Fatalf("streamed run through the forward: %d %s", res.StatusCode, ct)
	}
	dec := json.NewDecoder(res.Body)
	var seen []string
	stdout := ""
	for {
		var ev map[string]any
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("stream ended after %v: %v", seen, err)
		}
		name, _ := ev["event"].(string)
		seen = append(seen, name)
		switch name {
		case "approval_pending":
			// Still streaming: the run waits for this decision.
			a, _ := ev["approval"].(map[string]any)
			id, _ := a["id"].(string)
			dreq, _ := http.NewRequest("POST", approverBase+"/v1/approvals/"+id+"/decision", strings.NewReader(`{"decision":"approve"}`))
			dreq.Header.Set("Authorization", "Bearer "+approver)
			dres, err := http.DefaultClient.Do(dreq)
			if err != nil || dres.StatusCode != 200 {
				t.Fatalf("approve %q: %v %v", id, dres, err)
			}
			dres.Body.Close()
		case "stdout":
			d, _ := ev["data"].(string)
			stdout += d
		case "exit":
			if strings.TrimSpace(stdout) != "streamed" || !slices.Contains(seen, "approval_resolved") {
				t.Fatalf("events through the forward: %v, stdout %q", seen, stdout)
			}
			return
		case "error":
			t.Fatalf("error event: %v (after %v)", ev, seen)
		}
	}
}
