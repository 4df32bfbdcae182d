package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/executors/gvisor"
	"github.com/sandgate/sandgate/executors/subprocess"
)

// testEgressGrant: a held POST approved "for this session, 30 minutes,
// under /v1/" lets the session's next POST under /v1/ through the real
// proxy with no prompt, its request record naming the grant; a POST
// outside the prefix, a PUT and another session's POST are still held; the
// session's deletion revokes the grant.
func testEgressGrant(t *testing.T, kind string, exec executors.Executor) {
	e := newHTTPE2EWith(t, kind, exec, httpE2EOptions{heldMethods: []string{"POST", "PUT"}, grants: true})
	api := fmt.Sprintf("https://%s:%d", e2eRest, e.apiPort)
	target := fmt.Sprintf("%s:%d", e2eRest, e.apiPort)
	send := func(session, method, path string) string {
		return e.run(session, "python", httpFetch+fmt.Sprintf("print('out', send('%s', '%s%s', b'{}'))\n", method, api, path))
	}
	done := make(chan string, 1)
	go func() { done <- send("r", "POST", "/v1/items") }()
	id := e.pending("r", "POST "+target+"/v1/items")
	r := e.env().do("POST", "/v1/approvals/"+id+"/decision", approverTok,
		map[string]any{"decision": "approve", "scope": "session", "for_s": 1800, "path_prefix": "/v1/"})
	grant, _ := r.body["grant"].(map[string]any)
	if r.status != 200 || grant == nil || grant["path_prefix"] != "/v1/" || grant["method"] != "POST" {
		t.Fatalf("decision with a grant: %d %s", r.status, r.raw)
	}
	gid := grant["id"].(string)
	wantLine(t, <-done, "out 200 served POST /v1/items auth=no")

	// Under the prefix: no prompt (a prompt would hold the run until the
	// approval timeout and end in a 403).
	wantLine(t, send("r", "POST", "/v1/orders/7"), "out 200 served POST /v1/orders/7 auth=no")
	rec := e.requestRecord("r", "POST", "/v1/orders/7")
	approval, _ := rec["approval"].(map[string]any)
	detail, _ := rec["detail"].(map[string]any)
	if detail["grant_id"] != gid || detail["rule"] != "approval.grant" || approval["id"] != gid || approval["decided_by"] != "grant:"+gid {
		t.Errorf("the covered request's record does not name grant %s: %v", gid, rec)
	}

	// Another path, another method, another session: held again.
	for _, c := range []struct{ session, method, path string }{
		{"r", "POST", "/v2/items"}, {"r", "PUT", "/v1/items/1"}, {"r2", "POST", "/v1/items"},
	} {
		go func() { done <- send(c.session, c.method, c.path) }()
		e.decide(e.pending(c.session, c.method+" "+target+c.path), "deny", "")
		wantLine(t, <-done, `out 403 approval_denied rule=approval_denied header=decision=approval_denied; rule="approval_denied"`)
	}

	// The session's end revokes the grant: a session of the same name is
	// asked again.
	if d := e.env().do("DELETE", "/v1/sessions/r", agentTok, nil); d.status != 200 && d.status != 204 {
		t.Fatalf("delete session: %d %s", d.status, d.raw)
	}
	go func() { done <- send("r", "POST", "/v1/orders/8") }()
	e.decide(e.pending("r", "POST "+target+"/v1/orders/8"), "deny", "")
	wantLine(t, <-done, `out 403 approval_denied rule=approval_denied header=decision=approval_denied; rule="approval_denied"`)

	want := []string{"POST /v1/items auth=no", "POST /v1/orders/7 auth=no"}
	if got := e.rest.served(); !slices.Equal(got, want) {
		t.Errorf("the API server served\n %q\nwant only what was allowed\n %q", got, want)
	}
}

// requestRecord is the audit record of session's request method path
// (kind egress_request); the test fails without one.
func (e *httpE2E) requestRecord(session, method, path string) map[string]any {
	e.t.Helper()
	r := e.env().do("GET", "/v1/audit?kind="+egress.KindEgressRequest+"&session_id="+session+"&limit=500", adminTok, nil)
	recs, _ := r.body["records"].([]any)
	for _, x := range recs {
		rec, _ := x.(map[string]any)
		d, _ := rec["detail"].(map[string]any)
		if d["method"] == method && d["path"] == path {
			return rec
		}
	}
	e.t.Fatalf("no %s record of %s %s: %s", egress.KindEgressRequest, method, path, r.raw)
	return nil
}

func TestEgressGrantSubprocess(t *testing.T) {
	t.Parallel() // its own gateway, servers and resolver
	requireRoot(t)
	sp, err := subprocess.New(context.Background(), subprocess.Config{RootDir: os.Getenv("SANDGATE_RUNTIME_ROOT")})
	if err != nil {
		t.Fatal(err)
	}
	if !sp.Capabilities().NetworkGrant {
		t.Fatalf("the subprocess executor cannot grant network as root (isolation %s)", sp.Isolation())
	}
	testEgressGrant(t, "subprocess", sp)
}

func TestEgressGrantDocker(t *testing.T) {
	t.Parallel() // its own gateway, servers and resolver
	testEgressGrant(t, "docker", newDockerExecutor(t))
}

// TestEgressGrantGVisor is docker's path under runsc, as
// TestEgressHTTPAcceptanceGVisor.
func TestEgressGrantGVisor(t *testing.T) {
	t.Parallel() // its own gateway, servers and resolver
	var b [6]byte
	_, _ = rand.Read(b[:])
	g, err := gvisor.New(t.Context(), docker.Config{Instance: "api-egress-grant-" + hex.EncodeToString(b[:])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = g.Close(ctx)
	})
	if err := g.Available(t.Context()); err != nil || !g.Capabilities().NetworkGrant {
		if os.Getenv("SANDGATE_REQUIRE_GVISOR") == "1" {
			t.Fatalf("gVisor with the egress bridge required (SANDGATE_REQUIRE_GVISOR=1): available %v, network_grant %v",
				err, g.Capabilities().NetworkGrant)
		}
		t.Skipf("gVisor not usable with the egress bridge: %v", err)
	}
	testEgressGrant(t, "gvisor", g)
}
