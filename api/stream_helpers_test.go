package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// streamed is a streamed run as the client saw it, each event
// timestamped when its line arrived.
type streamed struct {
	status    int
	header    http.Header
	requestID string
	events    []map[string]any
	at        []time.Time
	body      map[string]any // an answer that was not a stream
}

// stream posts body to path as the agent with Accept:
// application/x-ndjson and reads the answer line by line. stop, when
// set, sees each event; returning true ends the read there and closes
// the connection (the client goes away).
func (e *env) stream(t *testing.T, ctx context.Context, path string, body any, stop func(ev map[string]any) bool) streamed {
	t.Helper()
	j, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+path, bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+agentTok)
	req.Header.Set("Accept", "application/x-ndjson")
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	s := streamed{status: res.StatusCode, header: res.Header, requestID: res.Header.Get("X-Request-Id")}
	if res.Header.Get("Content-Type") != "application/x-ndjson" {
		raw, _ := io.ReadAll(res.Body)
		if err := json.Unmarshal(raw, &s.body); err != nil {
			t.Fatalf("%s: neither a stream nor JSON: %q", path, raw)
		}
		return s
	}
	rd := bufio.NewReader(res.Body)
	for {
		line, err := rd.ReadBytes('\n')
		if len(line) > 0 {
			var ev map[string]any
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				t.Fatalf("%s: line %q: %v", path, line, jerr)
			}
			s.events = append(s.events, ev)
			s.at = append(s.at, time.Now())
			if stop != nil && stop(ev) {
				return s
			}
		}
		if err != nil {
			return s
		}
	}
}

// names lists the events' names in order.
func (s streamed) names() []string {
	out := make([]string, len(s.events))
	for i, ev := range s.events {
		out[i], _ = ev["event"].(string)
	}
	return out
}

// first returns the index of the first event named name, or -1.
func (s streamed) first(name string) int {
	for i, ev := range s.events {
		if ev["event"] == name {
			return i
		}
	}
	return -1
}

// last returns the last event (nil when there is none).
func (s streamed) last() map[string]any {
	if len(s.events) == 0 {
		return nil
	}
	return s.events[len(s.events)-1]
}

// text joins the data of the stdout or stderr events and checks that
// the output events are numbered 1, 2, … across both streams.
func (s streamed) text(t *testing.T, stream string) string {
	t.Helper()
	var b strings.Builder
	var seq float64
	for _, ev := range s.events {
		if ev["event"] != "stdout" && ev["event"] != "stderr" {
			continue
		}
		if seq++; ev["seq"] != seq {
			t.Fatalf("output event %v has seq %v, want %v", ev, ev["seq"], seq)
		}
		if ev["event"] == stream {
			b.WriteString(ev["data"].(string))
		}
	}
	return b.String()
}

// exitBody returns the exit event's body, failing unless the stream
// ended with it.
func (s streamed) exitBody(t *testing.T) map[string]any {
	t.Helper()
	last := s.last()
	if last == nil || last["event"] != "exit" {
		t.Fatalf("the stream did not end with exit: %v", s.names())
	}
	if strings.Count(strings.Join(s.names(), ","), "exit") != 1 {
		t.Fatalf("exit came more than once: %v", s.names())
	}
	return last["body"].(map[string]any)
}

// auditRecordsT is auditRecords failing t.
func (e *env) auditRecordsT(t *testing.T, session string) []audit.Record {
	t.Helper()
	page, err := e.audit.Query(context.Background(), audit.Query{SessionID: session, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return page.Records
}

// recordOf waits for the audit record of request id and returns it.
func (e *env) recordOf(t *testing.T, session, id string) audit.Record {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var found []audit.Record
		for _, r := range e.auditRecordsT(t, session) {
			if r.RequestID == id {
				found = append(found, r)
			}
		}
		if len(found) > 1 {
			t.Fatalf("%d audit records for %s, want 1", len(found), id)
		}
		// A run's record is written ahead as "started" and completed
		// when the run ends: wait for the completion.
		if len(found) == 1 && found[0].Outcome != audit.OutcomeStarted {
			return found[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completed audit record for %s: %v", id, found)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// routedPolicy is the default policy with every PERMISSIVE risk level
// allowed on executor: the streaming tests pick the backend, whatever
// the risk of their programs.
func routedPolicy(t testing.TB, executor string) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fsWalk(policy.DefaultFS(), func(p string, b []byte) {
		if p == "sandgate/config/data.json" {
			var data map[string]any
			if err := json.Unmarshal(b, &data); err != nil {
				t.Fatal(err)
			}
			for _, l := range obj(obj(data["modes"])["PERMISSIVE"]) {
				level := obj(l)
				level["action"], level["executor"] = "allow", executor
			}
			var err error
			if b, err = json.Marshal(data); err != nil {
				t.Fatal(err)
			}
		}
		m[p] = &fstest.MapFile{Data: b}
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
