package kernel

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// fakeDriver is the driver's side of a Conn, scripted by the test: the
// real driver runs in the kernel tests of api (it needs ipykernel).
type fakeDriver struct {
	reqs  *bufio.Scanner // what the Conn sent
	out   *io.PipeWriter // what the Conn reads
	close func()
}

func newFake(t *testing.T) (*Conn, *fakeDriver) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := New(inW, outR)
	f := &fakeDriver{reqs: bufio.NewScanner(inR), out: outW, close: func() { outW.Close(); inR.Close() }}
	t.Cleanup(func() { f.close(); c.Close() })
	return c, f
}

func (f *fakeDriver) request(t *testing.T) map[string]any {
	t.Helper()
	if !f.reqs.Scan() {
		t.Fatal("no request")
	}
	var m map[string]any
	if err := json.Unmarshal(f.reqs.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (f *fakeDriver) send(lines ...string) {
	for _, l := range lines {
		_, _ = io.WriteString(f.out, l+"\n")
	}
}

func TestRunFoldsEvents(t *testing.T) {
	cases := []struct {
		name       string
		events     []string
		exit       int
		timedOut   bool
		restarted  bool
		died       bool
		stdout     string
		stderrHas  string
		results    int
		dropped    bool
		firstPlain string
	}{
		{name: "ok with a value", events: []string{
			`{"ev":"stream","name":"stdout","text":"hi\n"}`,
			`{"ev":"display","data":{"text/plain":"42"}}`,
			`{"ev":"done","status":"ok","execution_count":1}`,
		}, stdout: "hi\n", results: 1, firstPlain: `"42"`},
		{name: "error with traceback", events: []string{
			`{"ev":"error","ename":"ZeroDivisionError","evalue":"division by zero","traceback":["\u001b[0;31mZeroDivisionError\u001b[0m: division by zero"]}`,
			`{"ev":"done","status":"error"}`,
		}, exit: 1, stderrHas: "ZeroDivisionError: division by zero"},
		{name: "timed out", events: []string{`{"ev":"done","status":"error","timed_out":true}`}, exit: 124, timedOut: true},
		{name: "died", events: []string{`{"ev":"done","status":"died","exit_status":137}`}, exit: 137, died: true,
			stderrHas: "the kernel died (exit status 137)"},
		{name: "restarted before the cell, one bundle dropped", events: []string{
			`{"ev":"dropped","bytes":99999999}`, `{"ev":"done","status":"ok","restarted":true}`,
		}, restarted: true, dropped: true},
		{name: "lost to an ignored interrupt", events: []string{`{"ev":"done","status":"error","timed_out":true,"lost":true}`},
			exit: 124, timedOut: true, restarted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFake(t)
			go func() {
				f.request(t)
				f.send(tc.events...)
			}()
			var stdout, stderr strings.Builder
			out, err := c.Run(t.Context(), Cell{Code: "x", Timeout: time.Second}, &stdout, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			if out.ExitCode != tc.exit || out.TimedOut != tc.timedOut || out.Restarted != tc.restarted || out.Died != tc.died ||
				out.Dropped != tc.dropped || len(out.Results) != tc.results {
				t.Fatalf("outcome %+v", out)
			}
			if stdout.String() != tc.stdout || !strings.Contains(stderr.String(), tc.stderrHas) || strings.Contains(stderr.String(), "\x1b") {
				t.Fatalf("stdout %q stderr %q", stdout.String(), stderr.String())
			}
			if tc.firstPlain != "" && string(out.Results[0]["text/plain"]) != tc.firstPlain {
				t.Fatalf("result %s", out.Results[0]["text/plain"])
			}
		})
	}
}

// A client that goes away interrupts the cell, and Run returns once the
// driver has finished it, so the kernel and its state survive.
func TestRunInterruptsOnCancel(t *testing.T) {
	c, f := newFake(t)
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan map[string]any, 2)
	go func() {
		got <- f.request(t) // execute
		cancel()
		got <- f.request(t) // interrupt
		f.send(`{"ev":"error","ename":"KeyboardInterrupt"}`, `{"ev":"done","status":"error"}`)
	}()
	_, err := c.Run(ctx, Cell{Code: "while True: pass", Timeout: time.Minute}, io.Discard, io.Discard)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if ex, in := <-got, <-got; ex["op"] != "execute" || ex["timeout_ms"] != float64(60000) || in["op"] != "interrupt" {
		t.Fatalf("requests %v %v", ex, in)
	}
}

func TestRunDriverGone(t *testing.T) {
	c, f := newFake(t)
	go func() {
		f.request(t)
		f.send(`{"ev":"stream","name":"stdout","text":"partial"}`)
		f.out.Close()
	}()
	var stdout strings.Builder
	_, err := c.Run(t.Context(), Cell{Code: "x", Timeout: time.Second}, &stdout, io.Discard)
	if !errors.Is(err, ErrGone) || stdout.String() != "partial" || c.Alive() {
		t.Fatalf("err %v stdout %q alive %v", err, stdout.String(), c.Alive())
	}
}

func TestReady(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{`{"ev":"ready"}`, true},
		{`{"ev":"fatal","message":"jupyter_client is missing"}`, false},
		{`not json`, false},
	} {
		c, f := newFake(t)
		go f.send(tc.line)
		err := c.Ready(t.Context())
		if (err == nil) != tc.ok || (!tc.ok && !errors.Is(err, ErrGone)) {
			t.Errorf("%s: %v", tc.line, err)
		}
	}
}

func TestMaskBundle(t *testing.T) {
	b := maskBundle(map[string]json.RawMessage{
		"text/plain":       json.RawMessage(`"/srv/ws/t~s/data.csv"`),
		"image/png":        json.RawMessage(`"iVBOR"`),
		"application/json": json.RawMessage(`{"p":"/srv/ws/t~s"}`),
	}, []string{"/srv/ws/t~s"})
	if s, _ := b.Text("text/plain"); s != "/workspace/data.csv" {
		t.Errorf("text/plain %q", s)
	}
	if string(b["image/png"]) != `"iVBOR"` || string(b["application/json"]) != `{"p":"/srv/ws/t~s"}` {
		t.Errorf("bundle %v", b)
	}
}
