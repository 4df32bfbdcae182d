package deerflow

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// fakeFleet plays the fleet Router for one replica (B) of a fleet in which
// another replica (A) serves every session: Route answers for the owner
// and records what it was asked. A request carrying X-Test-Hop is one A
// forwarded (its hop verified).
type fakeFleet struct {
	mu     sync.Mutex
	routed []routeCall
	err    error // Route's answer instead of the owner's
}

type routeCall struct {
	key, requestID string
	forwarded      bool
}

func (f *fakeFleet) Forwarded(r *http.Request) (string, bool) {
	if r.Header.Get("X-Test-Hop") == "" {
		return "", false
	}
	return "req_forwarded", true
}

func (f *fakeFleet) Route(w http.ResponseWriter, r *http.Request, key, requestID string, forwarded bool) (bool, error) {
	f.mu.Lock()
	f.routed = append(f.routed, routeCall{key: key, requestID: requestID, forwarded: forwarded})
	err := f.err
	f.mu.Unlock()
	if forwarded {
		return false, nil // the owner: served here
	}
	if err != nil {
		return false, err
	}
	w.Header().Set("X-Served-By", "A")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, `{"served_by":"A"}`)
	return true, nil
}

func (f *fakeFleet) calls() []routeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.routed
	f.routed = nil
	return out
}

// fleetReplica is replica B: the front end on a registry it shares with
// A, with no manager (every call that would reach it must be forwarded),
// its routes mounted as api mounts them.
type fleetReplica struct {
	mux   *http.ServeMux
	fleet *fakeFleet
	a     *Registry // replica A's registry on the same database
}

func newFleetReplica(t *testing.T) *fleetReplica {
	t.Helper()
	db, err := audit.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	a, err := OpenRegistry(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenRegistry(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeFleet{}
	s := newServer(Config{}, Deps{Registry: b, Fleet: f})
	mux := http.NewServeMux()
	s.Routes(func(pattern string, h http.Handler, provisioner bool) {
		inner := h
		mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := manager.WithRequestID(r.Context(), "req_b")
			if provisioner && r.Header.Get("X-API-Key") == "agent-key" {
				ctx = manager.WithPrincipal(ctx, manager.Principal{Role: "agent", Name: "deerflow", Tenant: "t1"})
			}
			inner.ServeHTTP(w, r.WithContext(ctx))
		}))
	})
	return &fleetReplica{mux: mux, fleet: f, a: a}
}

func (fr *fleetReplica) do(t *testing.T, method, target string, header map[string]string, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	r.Host = "gateway-b.internal:8080"
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	fr.mux.ServeHTTP(w, r)
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	return w, m
}

// TestFleetForwarding: on a replica that does not serve the sandbox's
// session, a sandbox call and a provisioner delete are forwarded to the
// owner with the session's key; a get and a list are answered from the
// store; a request the owner receives from a peer is not forwarded again;
// and a bad capability is refused without asking the fleet.
func TestFleetForwarding(t *testing.T) {
	fr := newFleetReplica(t)
	ctx := context.Background()
	sb, _, err := fr.a.create(ctx, sandbox{tenant: "t1", id: "sbx-1", threadID: "th1", userID: "u1", session: "df.u1.th1",
		sessionKey: "t1~df.u1.th1", ownerRole: "agent", ownerName: "deerflow"})
	if err != nil {
		t.Fatal(err)
	}
	url := "/deerflow/sandboxes/sbx-1/" + sb.cap
	key := map[string]string{"X-API-Key": "agent-key"}

	w, body := fr.do(t, "POST", url+"/v1/shell/exec", nil, `{"command":"echo hi"}`)
	if w.Code != 200 || body["served_by"] != "A" {
		t.Fatalf("sandbox call through B: %d %s", w.Code, w.Body)
	}
	if c := fr.fleet.calls(); len(c) != 1 || c[0] != (routeCall{key: "t1~df.u1.th1", requestID: "req_b"}) {
		t.Fatalf("routed %+v, want the session's key once, not forwarded", c)
	}

	w, body = fr.do(t, "GET", "/deerflow/api/sandboxes/sbx-1", key, "")
	if w.Code != 200 || body["sandbox_url"] != "http://gateway-b.internal:8080"+url || body["session_id"] != "df.u1.th1" {
		t.Fatalf("get through B: %d %s", w.Code, w.Body)
	}
	w, body = fr.do(t, "GET", "/deerflow/api/sandboxes", key, "")
	if w.Code != 200 || body["count"] != float64(1) {
		t.Fatalf("list through B: %d %s", w.Code, w.Body)
	}
	if c := fr.fleet.calls(); len(c) != 0 {
		t.Fatalf("get and list were routed: %+v", c)
	}

	// A request A forwarded (its hop verified) is served here, and its
	// sandbox_url names the address the client reached A by.
	hop := map[string]string{"X-API-Key": "agent-key", "X-Test-Hop": "1",
		"X-Forwarded-Host": "gateway.example.com", "X-Forwarded-Proto": "https"}
	w, body = fr.do(t, "GET", "/deerflow/api/sandboxes/sbx-1", hop, "")
	if w.Code != 200 || body["sandbox_url"] != "https://gateway.example.com"+url {
		t.Fatalf("get forwarded by A: %d %s", w.Code, w.Body)
	}
	// Without a verified hop, X-Forwarded-* are the client's and ignored.
	delete(hop, "X-Test-Hop")
	w, body = fr.do(t, "GET", "/deerflow/api/sandboxes/sbx-1", hop, "")
	if w.Code != 200 || body["sandbox_url"] != "http://gateway-b.internal:8080"+url {
		t.Fatalf("get with unverified X-Forwarded-Host: %d %s", w.Code, w.Body)
	}

	// A bad capability, or one sent for another sandbox, is answered here.
	if w, _ := fr.do(t, "POST", "/deerflow/sandboxes/sbx-1/sgdf_nope/v1/shell/exec", nil, `{"command":"x"}`); w.Code != 404 {
		t.Fatalf("unknown capability: %d %s", w.Code, w.Body)
	}
	if w, _ := fr.do(t, "POST", "/deerflow/sandboxes/sbx-2/"+sb.cap+"/v1/shell/exec", nil, `{"command":"x"}`); w.Code != 403 {
		t.Fatalf("capability of another sandbox: %d %s", w.Code, w.Body)
	}
	if c := fr.fleet.calls(); len(c) != 0 {
		t.Fatalf("refused calls were routed: %+v", c)
	}

	// An owner that cannot be reached while its lease lives: 503
	// session_unavailable with Retry-After, in the AIO envelope.
	fr.fleet.err = errcode.New(errcode.SessionUnavailable, "the replica serving this session does not answer")
	w, body = fr.do(t, "GET", url+"/v1/sandbox", nil, "")
	if e, _ := body["error"].(map[string]any); w.Code != 503 || w.Header().Get("Retry-After") == "" ||
		body["success"] != false || e["code"] != "session_unavailable" || e["request_id"] != "req_b" {
		t.Fatalf("unreachable owner: %d %v %s", w.Code, w.Header(), w.Body)
	}
	fr.fleet.err = nil
	fr.fleet.calls()

	// The delete goes to the owner, which ends the sandbox (here it only
	// answers: the row is still there).
	w, body = fr.do(t, "DELETE", "/deerflow/api/sandboxes/sbx-1", key, "")
	if w.Code != 200 || body["served_by"] != "A" {
		t.Fatalf("delete through B: %d %s", w.Code, w.Body)
	}
	if c := fr.fleet.calls(); len(c) != 1 || c[0].key != "t1~df.u1.th1" || c[0].forwarded {
		t.Fatalf("delete routed %+v", c)
	}
	if _, ok, _ := fr.a.get(ctx, "t1", "sbx-1"); !ok {
		t.Fatal("B deleted the sandbox itself instead of forwarding the delete")
	}
	// A delete of an unknown sandbox succeeds here, as DeerFlow expects.
	if w, body := fr.do(t, "DELETE", "/deerflow/api/sandboxes/sbx-9", key, ""); w.Code != 200 || body["ok"] != true {
		t.Fatalf("delete of an unknown sandbox: %d %s", w.Code, w.Body)
	}
	if c := fr.fleet.calls(); len(c) != 0 {
		t.Fatalf("delete of an unknown sandbox routed %+v", c)
	}

	// A provisioner route mounted without authentication refuses.
	if w, body := fr.do(t, "GET", "/deerflow/api/sandboxes", nil, ""); w.Code != 401 || body["detail"] == nil {
		t.Fatalf("unauthenticated provisioner call: %d %s", w.Code, w.Body)
	}
}
