package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
)

// heldCall is one held run in flight: its body's writer, and its answer
// once the server gives it.
type heldCall struct {
	body   *io.PipeWriter
	answer chan reply
}

// postHeld sends path's JSON body with aiowire.HoldHeader and keeps the
// body open: the caller releases the run, ends the body or breaks it.
func (ts *testServer) postHeld(path string, body map[string]any) heldCall {
	ts.t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, ts.hs.URL+path, pr)
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-AIO-API-Key", testKey)
	req.Header.Set(aiowire.HoldHeader, "1")
	call := heldCall{body: pw, answer: make(chan reply, 1)}
	ts.t.Cleanup(func() { _ = pw.CloseWithError(errors.New("the test ended")) })
	go func() {
		res, err := ts.hs.Client().Do(req)
		if err != nil {
			call.answer <- reply{status: -1, raw: []byte(err.Error())}
			return
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		r := reply{status: res.StatusCode, raw: raw}
		_ = json.Unmarshal(raw, &r.body)
		call.answer <- r
	}()
	go func() {
		b, _ := json.Marshal(body)
		_, _ = pw.Write(b)
	}()
	return call
}

// TestHeldRun: a held run is staged and nothing of it runs until its
// release; released, it runs as any run; a body that ends or breaks
// before the release, or a caller silent past HoldTimeout, discards it,
// with no process left.
func TestHeldRun(t *testing.T) {
	ts := newTestServer(t, func(c *config) { c.CodeDir = t.TempDir(); c.HoldTimeout = 2 * time.Second })
	for deadline := time.Now().Add(10 * time.Second); ts.srv.jobs.trap.state.Load() == trapUnknown; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the probe did not finish in 10 s")
		}
	}
	langs := []struct{ lang, code string }{
		{"python", "open('ran-%d', 'w').close()\nprint('hi')"},
		{"bash", "touch ran-%d; echo hi"},
	}
	ends := []struct {
		name string
		end  func(heldCall)
		want int // the answer's status; 0: none is waited for
	}{
		{"released", func(c heldCall) { _, _ = c.body.Write([]byte{aiowire.Release}); _ = c.body.Close() }, http.StatusOK},
		{"body ended", func(c heldCall) { _ = c.body.Close() }, http.StatusConflict},
		{"another byte", func(c heldCall) { _, _ = c.body.Write([]byte("x")); _ = c.body.Close() }, http.StatusConflict},
		{"connection broken", func(c heldCall) { _ = c.body.CloseWithError(errors.New("gone")) }, 0},
		// A caller that hangs: the run is discarded at HoldTimeout.
		{"never released", func(heldCall) {}, http.StatusConflict},
	}
	n := 0
	for _, l := range langs {
		for _, e := range ends {
			n++
			t.Run(l.lang+"/"+e.name, func(t *testing.T) {
				marker := filepath.Join(ts.ws, fmt.Sprintf("ran-%d", n))
				code := fmt.Sprintf(l.code, n)
				path, body := "/v1/code/execute", map[string]any{"language": l.lang, "code": code}
				if l.lang == "bash" {
					path, body = "/v1/bash/exec", map[string]any{"command": code}
				}
				body["x_sandgate"] = map[string]any{"program": fmt.Sprintf("req-held-%d", n), "limits": map[string]any{"memory_mb": 256}}
				call := ts.postHeld(path, body)
				pid := awaitStaged(t, ts)
				time.Sleep(100 * time.Millisecond) // it would have run by now
				if _, err := os.Stat(marker); err == nil {
					t.Fatal("the held run ran before its release")
				}
				e.end(call)
				if e.want != 0 {
					r := <-call.answer
					if r.status != e.want {
						t.Fatalf("answer %d, want %d: %s", r.status, e.want, r.raw)
					}
					if e.want == http.StatusOK {
						if d, _ := r.body["data"].(map[string]any); d["stdout"] != "hi\n" {
							t.Errorf("released run: %s", r.raw)
						}
					}
				}
				awaitDiscarded(t, ts, pid)
				_, err := os.Stat(marker)
				if ran := err == nil; ran != (e.want == http.StatusOK) {
					t.Errorf("ran %v, want %v", ran, e.want == http.StatusOK)
				}
			})
		}
	}
}

// awaitStaged waits for the one live run to be stopped at its exec, held,
// and returns its pid.
func awaitStaged(t *testing.T, ts *testServer) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ts.srv.jobs.mu.Lock()
		pid := 0
		for _, j := range ts.srv.jobs.live {
			pid = j.root.pid
		}
		ts.srv.jobs.mu.Unlock()
		if pid == 0 {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if _, after, ok := strings.Cut(string(stat), ") "); err == nil && ok && strings.HasPrefix(after, "t") {
			return pid
		}
	}
	t.Fatal("no run was stopped at its exec in 10 s")
	return 0
}

// awaitDiscarded waits for the run's process to be gone and the job table empty.
func awaitDiscarded(t *testing.T, ts *testServer, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ts.srv.jobs.mu.Lock()
		live := len(ts.srv.jobs.live)
		ts.srv.jobs.mu.Unlock()
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil && live == 0 {
			return
		}
	}
	t.Fatalf("the run's process %d or its job is still there after 10 s", pid)
}

// TestHeldBadBody: a held request whose body is not one JSON object gets
// the 422 the same body gets unheld, offset included, and nothing starts.
func TestHeldBadBody(t *testing.T) {
	s := &server{cfg: defaultConfig()}
	for _, body := range []string{``, `{"code": 1`, `{"code": }`, `nul`, `[1]`, `{"code": 7}`, `null`} {
		t.Run(body, func(t *testing.T) {
			answer := func(held bool) (int, string) {
				r := httptestRequest(body)
				w := httptest.NewRecorder()
				var dst struct {
					Code string `json:"code"`
				}
				if held {
					r.Header.Set(aiowire.HoldHeader, "1")
					if hold, ok := s.decodeHeld(w, r, &dst, "code"); ok || hold != nil {
						t.Fatalf("held %q was accepted", body)
					}
				} else if decodeBody(w, r, &dst, "code") {
					t.Fatalf("%q was accepted", body)
				}
				return w.Code, w.Body.String()
			}
			hc, hb := answer(true)
			uc, ub := answer(false)
			if hc != http.StatusUnprocessableEntity || hc != uc || hb != ub {
				t.Errorf("held: %d %s\nunheld: %d %s", hc, hb, uc, ub)
			}
		})
	}
}

func httptestRequest(body string) *http.Request {
	return httptest.NewRequest(http.MethodPost, "/v1/code/execute", strings.NewReader(body))
}
