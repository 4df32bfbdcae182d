package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/executors/output"
)

// streamed is a streamed answer as a client sees it.
type streamed struct {
	status      int
	contentType string
	chunks      []aiowire.StreamEvent
	chunkAt     []time.Time
	result      map[string]any // the envelope of the last line
	resultAt    time.Time
}

// stream posts body to path with ctx and reads the answer line by line,
// timestamping each. stop, when set, is called after each chunk; it ends
// the read (and the request) by returning true.
func (ts *testServer) stream(ctx context.Context, path string, body any, stop func(aiowire.StreamEvent) bool) streamed {
	ts.t.Helper()
	j, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.hs.URL+path, bytes.NewReader(j))
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-AIO-API-Key", testKey)
	res, err := ts.hs.Client().Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer res.Body.Close()
	out := streamed{status: res.StatusCode, contentType: res.Header.Get("Content-Type")}
	if out.contentType != aiowire.StreamMediaType {
		return out
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev aiowire.StreamEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			ts.t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if ev.Result != nil {
			out.resultAt = time.Now()
			if err := json.Unmarshal(ev.Result, &out.result); err != nil {
				ts.t.Fatalf("result %s: %v", ev.Result, err)
			}
			continue
		}
		out.chunks = append(out.chunks, ev)
		out.chunkAt = append(out.chunkAt, time.Now())
		if stop != nil && stop(ev) {
			return out
		}
	}
	return out
}

// text joins the chunks of one stream.
func (s streamed) text(stream string) string {
	var b strings.Builder
	for _, c := range s.chunks {
		if c.Stream == stream {
			b.Write(c.Data)
		}
	}
	return b.String()
}

// TestStreamedRun: with x_sandgate.stream, a synchronous run answers one
// event per line: line 1 arrives while the program still runs (it waits,
// at most 20 s, for the file the test creates once it has line 1, and
// says "gate timeout" if it gives up), the chunks are numbered in order
// and add up to the result, and the last line is the envelope the call
// answers without streaming.
func TestStreamedRun(t *testing.T) {
	ts := newTestServer(t)
	ext := map[string]any{"stream": true, "output_limit": 1000}
	for _, tc := range []struct {
		name, path string
		body       func(gate string) map[string]any
	}{
		{name: "code", path: "/v1/code/execute", body: func(gate string) map[string]any {
			return map[string]any{"language": "python", "x_sandgate": ext,
				"code": fmt.Sprintf("import os, sys, time\nprint('line 1', flush=True)\ndeadline = time.monotonic() + 20\n"+
					"while not os.path.exists(%[1]q) and time.monotonic() < deadline:\n    time.sleep(0.05)\n"+
					"print('oops' if os.path.exists(%[1]q) else 'gate timeout', file=sys.stderr, flush=True)\nprint('line 2')", gate)}
		}},
		{name: "bash", path: "/v1/bash/exec", body: func(gate string) map[string]any {
			return map[string]any{"x_sandgate": ext,
				"command": fmt.Sprintf("echo 'line 1'; while [ ! -e %[1]q ] && (( SECONDS < 20 )); do sleep 0.05; done; "+
					"if [ -e %[1]q ]; then echo oops >&2; else echo 'gate timeout' >&2; fi; echo 'line 2'", gate)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := filepath.Join(ts.ws, "gate-"+tc.name)
			s := ts.stream(t.Context(), tc.path, tc.body(gate), func(ev aiowire.StreamEvent) bool {
				if strings.HasPrefix(string(ev.Data), "line 1") {
					if err := os.WriteFile(gate, nil, 0o644); err != nil {
						t.Errorf("open the gate: %v", err)
					}
				}
				return false
			})
			if s.status != http.StatusOK || s.contentType != aiowire.StreamMediaType || s.result == nil {
				t.Fatalf("status %d content type %q result %v", s.status, s.contentType, s.result)
			}
			// python -u writes "line 1" and its newline separately.
			if len(s.chunks) == 0 || !strings.HasPrefix(string(s.chunks[0].Data), "line 1") || s.chunks[0].Stream != "stdout" {
				t.Fatalf("first chunk %+v", s.chunks)
			}
			if strings.Contains(s.text("stderr"), "gate timeout") {
				t.Fatalf("the program waited 20s for the test to receive line 1 and gave up: line 1 was not streamed while it ran")
			}
			for i, c := range s.chunks {
				if c.Seq != uint64(i+1) {
					t.Errorf("chunk %d has seq %d", i, c.Seq)
				}
			}
			if s.result["success"] != true {
				t.Fatalf("envelope %v", s.result)
			}
			x := s.result["data"].(map[string]any)["x_sandgate"].(map[string]any)
			out, _ := base64.StdEncoding.DecodeString(x["stdout_b64"].(string))
			errb, _ := base64.StdEncoding.DecodeString(x["stderr_b64"].(string))
			if string(out) != "line 1\nline 2\n" || string(errb) != "oops\n" {
				t.Errorf("result stdout %q stderr %q", out, errb)
			}
			if s.text("stdout") != string(out) || s.text("stderr") != string(errb) {
				t.Errorf("streamed stdout %q stderr %q differ from the result", s.text("stdout"), s.text("stderr"))
			}
		})
	}
}

// TestStreamedRunCapped: the stream carries only what the response keeps.
func TestStreamedRunCapped(t *testing.T) {
	ts := newTestServer(t)
	s := ts.stream(t.Context(), "/v1/bash/exec", map[string]any{"command": "head -c 5000 /dev/zero | tr '\\0' x",
		"x_sandgate": map[string]any{"stream": true, "output_limit": 100}}, nil)
	if s.result == nil || s.text("stdout") != strings.Repeat("x", 100) {
		t.Fatalf("streamed %q, result %v", s.text("stdout"), s.result)
	}
}

// TestStreamNotAsked: without x_sandgate.stream the answers stay the AIO
// envelope, and with it an error found before the run starts is still an
// ordinary JSON answer.
func TestStreamNotAsked(t *testing.T) {
	ts := newTestServer(t)
	r := ts.post("/v1/code/execute", map[string]any{"language": "python", "code": "print(1)", "x_sandgate": map[string]any{"output_limit": 100}})
	if d := r.envelope(t, true); d["stdout"] != "1\n" {
		t.Fatalf("plain answer %s", r.raw)
	}
	s := ts.stream(t.Context(), "/v1/code/execute", map[string]any{"language": "python", "code": "print(1)", "cwd": "/nonexistent",
		"x_sandgate": map[string]any{"stream": true}}, nil)
	if s.status != http.StatusBadRequest || !strings.HasPrefix(s.contentType, "application/json") {
		t.Fatalf("bad cwd: %d %q", s.status, s.contentType)
	}
}

// TestStreamCallerGone: a caller that goes away in the middle of a
// streamed run takes the run's whole process tree with it.
func TestStreamCallerGone(t *testing.T) {
	ts := newTestServer(t)
	for _, tc := range []struct{ name, path, key string }{
		{"code", "/v1/code/execute", "code"},
		{"bash", "/v1/bash/exec", "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := executortest.NewMarkers(2)
			prog := fmt.Sprintf("sleep %s & setsid sleep %s & echo started; sleep 1000", m[0], m[1])
			body := map[string]any{tc.key: prog, "x_sandgate": map[string]any{"stream": true}}
			if tc.name == "code" {
				body = map[string]any{"language": "python", "x_sandgate": map[string]any{"stream": true},
					"code": fmt.Sprintf("import subprocess\nsubprocess.run(['bash', '-c', %q])", prog)}
			}
			ctx, cancel := context.WithCancel(t.Context())
			s := ts.stream(ctx, tc.path, body, func(ev aiowire.StreamEvent) bool {
				if !strings.Contains(string(ev.Data), "started") {
					return false
				}
				seen := executortest.WatchMarkers(m, func() { time.Sleep(300 * time.Millisecond) })
				if len(seen) != len(m) {
					t.Errorf("marked processes seen: %v", seen)
				}
				cancel()
				return true
			})
			cancel()
			if len(s.chunks) == 0 {
				t.Fatalf("nothing streamed: %+v", s)
			}
			if left := executortest.WaitMarkersGone(m, 5*time.Second); len(left) > 0 {
				t.Fatalf("processes still alive after the caller left: %v", left)
			}
		})
	}
}

// TestRelayNumbersWhatItSends: chunks the queue merged for a slow reader
// leave gaps in the collector's numbers (a merged chunk keeps its first
// part's); the answer numbers the events it sends 1, 2, … all the same,
// so a reader never takes a merge for a lost event.
func TestRelayNumbersWhatItSends(t *testing.T) {
	rec := httptest.NewRecorder()
	rl := newRelay(&runExtension{Stream: true})
	rl.enc, rl.rc = json.NewEncoder(rec), http.NewResponseController(rec)
	tap := rl.tap()
	for _, c := range []output.Chunk{
		{Seq: 1, Stream: output.Stdout, Data: []byte("a")},
		{Seq: 2, Stream: output.Stdout, Data: []byte("b")}, // joins seq 1: nothing was taken yet
		{Seq: 3, Stream: output.Stderr, Data: []byte("e")},
	} {
		tap(c)
	}
	rl.send()
	tap(output.Chunk{Seq: 4, Stream: output.Stdout, Data: []byte("c")})
	rl.send()
	var got []string
	for dec := json.NewDecoder(rec.Body); dec.More(); {
		var ev aiowire.StreamEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d %s %s", ev.Seq, ev.Stream, ev.Data))
	}
	if want := []string{"1 stdout ab", "2 stderr e", "3 stdout c"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
