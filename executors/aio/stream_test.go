package aio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
)

// chunkLog is a Spec.Output that keeps what it gets, with the time.
type chunkLog struct {
	mu     sync.Mutex
	chunks []output.Chunk
	at     []time.Time
}

func (l *chunkLog) tap(c output.Chunk) {
	c.Data = append([]byte(nil), c.Data...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.chunks = append(l.chunks, c)
	l.at = append(l.at, time.Now())
}

func (l *chunkLog) text(s output.Stream) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, c := range l.chunks {
		if c.Stream == s {
			b.Write(c.Data)
		}
	}
	return b.String()
}

// TestClientStreamsFromSandboxd: with Spec.Output set, sandboxd streams
// and each chunk reaches the output while the program still runs, for
// both endpoints; the stream is the Result, within the cap. The program
// waits (at most 30 s) after line 1 for the file the output creates once
// it has line 1, and says "gate timeout" if it gives up: a run that ends
// without saying so streamed line 1 while it ran, however slow delivery.
func TestClientStreamsFromSandboxd(t *testing.T) {
	ws := t.TempDir()
	c := localSandboxd(t, ws)
	for _, tc := range []struct{ lang, code string }{
		{executors.LangBash, "echo 'line 1'; while [ ! -e %[1]q ] && (( SECONDS < 30 )); do sleep 0.05; done; " +
			"if [ -e %[1]q ]; then echo e >&2; else echo 'gate timeout' >&2; fi; echo 'line 2'"},
		{executors.LangPython, "import os, sys, time\nprint('line 1', flush=True)\ndeadline = time.monotonic() + 30\n" +
			"while not os.path.exists(%[1]q) and time.monotonic() < deadline:\n    time.sleep(0.05)\n" +
			"print('e' if os.path.exists(%[1]q) else 'gate timeout', file=sys.stderr)\nprint('line 2')"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			gate := filepath.Join(ws, "gate-"+tc.lang)
			var log chunkLog
			r := localRun(tc.lang, fmt.Sprintf(tc.code, gate), time.Minute)
			r.dir = ws
			r.output = func(ch output.Chunk) {
				log.tap(ch)
				if strings.HasPrefix(string(ch.Data), "line 1") {
					if err := os.WriteFile(gate, nil, 0o644); err != nil {
						t.Errorf("open the gate: %v", err)
					}
				}
			}
			res, err := run(t.Context(), c, r)
			if err == nil && strings.Contains(res.Stderr, "gate timeout") {
				t.Fatalf("the program waited 30s for line 1 to reach the output and gave up: it was not streamed while it ran (%+v)", res)
			}
			if err != nil || res.Stdout != "line 1\nline 2\n" || res.Stderr != "e\n" {
				t.Fatalf("run: %+v %v", res, err)
			}
			if log.text(output.Stdout) != res.Stdout || log.text(output.Stderr) != res.Stderr {
				t.Fatalf("streamed %q / %q, result %q / %q", log.text(output.Stdout), log.text(output.Stderr), res.Stdout, res.Stderr)
			}
			for i, ch := range log.chunks {
				if ch.Seq != uint64(i+1) {
					t.Errorf("chunk %d has seq %d", i, ch.Seq)
				}
			}
		})
	}
	t.Run("capped", func(t *testing.T) {
		var log chunkLog
		r := localRun(executors.LangBash, "head -c 5000 /dev/zero | tr '\\0' y", 10*time.Second)
		r.dir, r.output = ws, log.tap
		r.limits.MaxOutputBytes = 100
		res, err := run(t.Context(), c, r)
		if err != nil || log.text(output.Stdout) != res.Stdout || len(res.Stdout) != 100 {
			t.Fatalf("streamed %d bytes, result %d bytes (%v)", len(log.text(output.Stdout)), len(res.Stdout), err)
		}
	})
}

// streamServer answers /v1/code/execute with the given lines as a stream.
func streamServer(t *testing.T, lines ...any) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req CodeExecuteRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.XSandgate == nil || !req.XSandgate.Stream {
			t.Errorf("request did not ask for a stream: %+v %v", req, err)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		for _, l := range lines {
			_ = enc.Encode(l)
		}
	}))
	t.Cleanup(srv.Close)
	return NewHTTPClient(srv.URL, "k")
}

// TestClientStreamDistrusted: the gateway enforces the cap on what it
// relays whatever the sandbox sends, and a stream that ends without its
// result line is an unknown outcome (the instance is recycled).
func TestClientStreamDistrusted(t *testing.T) {
	flood := StreamEvent{Seq: 1, Stream: "stdout", Data: []byte(strings.Repeat("z", 5000))}
	result := StreamEvent{Result: json.RawMessage(`{"success":true,"message":"ok","hint":null,"data":{"status":"ok","exit_code":0,
		"x_sandgate":{"stdout_b64":"` + strings.Repeat("enp6", 33) + `eg==","stderr_b64":"","truncated":true,"stdout_truncated":true}}}`)}
	t.Run("cap", func(t *testing.T) {
		var log chunkLog
		r := localRun(executors.LangPython, "print(1)", 5*time.Second)
		r.output, r.limits.MaxOutputBytes = log.tap, 100
		res, err := run(t.Context(), streamServer(t, flood, flood, StreamEvent{Seq: 3, Stream: "other", Data: []byte("?")}, result), r)
		if err != nil || len(log.text(output.Stdout)) != 100 || log.text(output.Stdout) != res.Stdout {
			t.Fatalf("relayed %d bytes of stdout, result %+v %v", len(log.text(output.Stdout)), res, err)
		}
		if len(log.chunks) != 1 {
			t.Errorf("%d chunks relayed, want 1 (the rest is past the cap or of no stream)", len(log.chunks))
		}
	})
	t.Run("no result", func(t *testing.T) {
		var log chunkLog
		r := localRun(executors.LangPython, "print(1)", 5*time.Second)
		r.output = log.tap
		if _, err := run(t.Context(), streamServer(t, flood), r); !errors.Is(err, errUnknownOutcome) {
			t.Fatalf("err %v, want an unknown outcome", err)
		}
	})
}

// TestClientStreamAnsweredPlain: a server that ignores x_sandgate.stream
// answers with the envelope, which is the whole result.
func TestClientStreamAnsweredPlain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"success":true,"message":"ok","hint":null,"data":{"status":"ok","stdout":"1\n","stderr":"","exit_code":0}}`))
	}))
	defer srv.Close()
	var log chunkLog
	r := localRun(executors.LangPython, "print(1)", 5*time.Second)
	r.output = log.tap
	res, err := run(context.Background(), NewHTTPClient(srv.URL, "k"), r)
	if err != nil || res.Stdout != "1\n" || len(log.chunks) != 0 {
		t.Fatalf("result %+v %v, %d chunks", res, err, len(log.chunks))
	}
}
