package fleet_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/fleet"
	"github.com/sandgate/sandgate/internal/pgtest"
)

func register(t *testing.T, dsn, name string, lease time.Duration) *fleet.Registry {
	t.Helper()
	r, err := fleet.Register(t.Context(), open(t, dsn, name), fleet.Options{Replica: name, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	r.Run(func(context.Context, string) error { return nil })
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

func claim(t *testing.T, r *fleet.Registry, key string) fleet.Owner {
	t.Helper()
	o, err := r.Claim(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestSessionOwnership: the first replica to serve a session owns it; the
// others see the owner and its address; once the owner's lease expires the
// next replica to serve it adopts it; a released session is free.
func TestSessionOwnership(t *testing.T) {
	dsn := pgtest.Schema(t)
	// A lease no heartbeat misses on a loaded machine (CI ran this beside
	// the fault soak): a's expiry is Expire, not a wait.
	const lease = 10 * time.Second
	a, b := register(t, dsn, "a", lease), register(t, dsn, "b", lease)
	for _, r := range []*fleet.Registry{a, b} {
		if err := r.SetURL(t.Context(), "http://"+r.Name()+".test:8080"); err != nil {
			t.Fatal(err)
		}
	}
	if o := claim(t, a, "t~s1"); !o.Local || o.AdoptedFrom != "" {
		t.Fatalf("a's first claim: %+v", o)
	}
	if o := claim(t, a, "t~s1"); !o.Local {
		t.Fatalf("a again: %+v", o)
	}
	if o := claim(t, b, "t~s1"); o.Local || o.Replica != "a" || o.URL != "http://a.test:8080" {
		t.Fatalf("b's view of a's session: %+v", o)
	}
	if o := claim(t, b, "u~s1"); !o.Local {
		t.Fatalf("another tenant's s1 is another session: %+v", o)
	}
	if err := a.Expire(t.Context()); err != nil {
		t.Fatal(err)
	}
	if o := claim(t, b, "t~s1"); !o.Local || o.AdoptedFrom != "a" {
		t.Fatalf("b after a's lease expired: %+v, want adopted from a", o)
	}
	a2 := register(t, dsn, "a", lease)
	if o := claim(t, a2, "t~s1"); o.Local || o.Replica != "b" {
		t.Fatalf("a back: %+v, want b's", o)
	}
	if err := b.Release(t.Context(), "t~s1"); err != nil {
		t.Fatal(err)
	}
	if o := claim(t, a2, "t~s1"); !o.Local {
		t.Fatalf("a after b released it: %+v", o)
	}
	// A replica that left the fleet serves what reaches it unclaimed.
	if err := b.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if o := claim(t, b, "t~s9"); !o.Local {
		t.Fatalf("b after leaving: %+v", o)
	}
	if o := claim(t, a2, "t~s9"); !o.Local {
		t.Fatalf("a after b served s9 unclaimed: %+v", o)
	}
}

// replica is a registry and router behind an HTTP server whose handler
// does what package api does: it routes, and serves what stays here by
// naming itself, the caller's credential and whether a hop was verified.
type replica struct {
	reg    *fleet.Registry
	router *fleet.Router
	srv    *httptest.Server
}

func startReplica(t *testing.T, dsn, name string, lease time.Duration) *replica {
	t.Helper()
	rep := &replica{reg: register(t, dsn, name, lease)}
	router, err := fleet.NewRouter(t.Context(), rep.reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep.router = router
	rep.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqID, hop := router.Forwarded(r)
		if !hop {
			reqID = "req_" + name
		}
		handled, err := router.Route(w, r, "t~"+strings.TrimPrefix(r.URL.Path, "/s/"), reqID, hop)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if handled {
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintf(w, "%s %s hop=%v %s %s\n", name, r.Header.Get("Authorization"), hop, reqID, body)
		w.(http.Flusher).Flush()
		fmt.Fprintf(w, "done\n")
	}))
	t.Cleanup(rep.srv.Close)
	if err := rep.reg.SetURL(t.Context(), rep.srv.URL); err != nil {
		t.Fatal(err)
	}
	return rep
}

func post(t *testing.T, base, session, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/s/"+session, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer agent-x")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestRouterForwards: a request reaching a replica that does not own the
// session is served by the owner, with the client's credential, body and a
// verified hop carrying the forwarder's request id; when the owner is
// killed, the next request waits out its lease and is served (adopted)
// where it landed.
func TestRouterForwards(t *testing.T) {
	dsn := pgtest.Schema(t)
	// a's lease is short, to be waited out; b, the survivor, keeps a lease
	// no heartbeat misses on a loaded machine (it waits up to twice its
	// own lease for a's to run out).
	const lease, survivorLease = 2 * time.Second, 10 * time.Second
	a, b := startReplica(t, dsn, "a", lease), startReplica(t, dsn, "b", survivorLease)
	if st, out := post(t, a.srv.URL, "s1", "one"); st != 200 || out != "a Bearer agent-x hop=false req_a one\ndone\n" {
		t.Fatalf("on the owner: %d %q", st, out)
	}
	if st, out := post(t, b.srv.URL, "s1", "two"); st != 200 || out != "a Bearer agent-x hop=true req_b two\ndone\n" {
		t.Fatalf("through b: %d %q", st, out)
	}
	// A client cannot pass itself off as a replica.
	req, _ := http.NewRequest("POST", b.srv.URL+"/s/s1", strings.NewReader("forged"))
	req.Header.Set(fleet.HopHeader, "a;"+fmt.Sprint(time.Now().UnixMilli())+";req_x;00")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.HasPrefix(string(raw), "a  hop=true req_b forged") {
		t.Fatalf("forged hop: %q, want forwarded to a as b's own request", raw)
	}
	a.srv.Close() // a's process is gone; its lease is not
	a.reg.Kill()
	t0 := time.Now()
	if st, out := post(t, b.srv.URL, "s1", "three"); st != 200 || out != "b Bearer agent-x hop=false req_b three\ndone\n" {
		t.Fatalf("after a died: %d %q", st, out)
	}
	// Served when a's lease ran out (at most 2 s, then b polls every
	// second), not at the router's give-up deadline (twice b's lease).
	if d := time.Since(t0); d > 15*time.Second {
		t.Fatalf("adopted after %v, lease %v", d, lease)
	}
	if o := claim(t, b.reg, "t~s1"); !o.Local {
		t.Fatalf("b's registry after adoption: %+v", o)
	}
}
