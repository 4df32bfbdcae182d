package aio

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
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
// both endpoints; the stream is the Result, within the cap.
func TestClientStreamsFromSandboxd(t *testing.T) {
	ws := t.TempDir()
	c := localSandboxd(t, ws)
	for _, tc := range []struct{ lang, code string }{
		{executors.LangBash, "echo 'line 1'; sleep 1.5; echo e >&2; echo 'line 2'"},
		{executors.LangPython, "import sys, time\nprint('line 1', flush=True)\ntime.sleep(1.5)\nprint('e', file=sys.stderr)\nprint('line 2')"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			var log chunkLog
			r := localRun(tc.lang, tc.code, 10*time.Second)
			r.dir, r.output = ws, log.tap
			res, err := run(t.Context(), c, r)
			ended := time.Now()
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
			if early := ended.Sub(log.at[0]); early < time.Second {
				t.Errorf("line 1 reached the output %v before the run ended, want more than 1s", early)
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
