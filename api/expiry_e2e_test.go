package api

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// TestSessionExpiryReleasesEverything: a session whose TTL or idle timeout
// passes gives back what it held, counted before and after on the real
// parts: its kernel and warm containers on the engine, its warm
// interpreters and zygotes in the subprocess executor, its Chromium. It
// then shows as expired and refuses runs.
func TestSessionExpiryReleasesEverything(t *testing.T) {
	d := newDockerExecutor(t)
	chromium := requireBrowser(t)
	pages := testPages(t)
	dir := t.TempDir()
	traversable(t, dir)
	ctx := context.Background()
	st, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ws, err := workspace.New(filepath.Join(dir, "workspaces"), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := subprocess.New(ctx, subprocess.Config{WarmMax: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close(context.Background()) })
	browserDir := t.TempDir()
	bm, err := browser.New(browser.Config{ChromiumPath: chromium, AllowHosts: []string{hostPort(pages.URL)}, DataDir: browserDir},
		browser.Deps{Policy: eng, Audit: st, Workspaces: ws, Resolver: offlineDNS{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bm.Close(context.Background()) })
	mgr, err := manager.New(manager.Config{Mode: "STRICT", ReapInterval: 100 * time.Millisecond}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Executors: []executors.Executor{sp, d},
		Workspaces: ws, Audit: st, Sessions: st, Metrics: manager.NewMetrics(prometheus.NewRegistry()),
		Resources: []manager.SessionResource{{Name: "browser", Release: bm.ReleaseSession}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	auth, err := NewAuth([]Token{NewToken("a", RoleAgent, agentTok)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{}, Deps{Manager: mgr, Policy: eng, Audit: st, Auth: auth, Gatherer: prometheus.NewRegistry(),
		Browser: bm}))
	t.Cleanup(srv.Close)
	e := &env{t: t, srv: srv, dataDir: dir, audit: st, ws: ws}

	for _, c := range []struct {
		name  string
		patch map[string]any // once the session holds everything
	}{
		{"ttl", map[string]any{"timeout_s": 2}},
		{"idle", map[string]any{"idle_timeout_s": 2}},
	} {
		session := "expire-" + c.name
		if r := e.do("POST", "/v1/sessions", agentTok, map[string]any{"id": session}); r.status != 201 {
			t.Fatalf("%s: create: %d %s", c.name, r.status, r.raw)
		}
		key := workspace.Key("a", session)
		for _, req := range []struct{ path, lang, code string }{
			{"run_code", "python", "x = 1"},       // a kernel (stateful, below)
			{"execute", "", "ls -la"},             // LOW: docker runs; after the second
			{"execute", "", "ls -la"},             // the session gets a warm container
			{"run_code", "python", "print('hi')"}, // SAFE: subprocess, a warm interpreter
		} {
			body := map[string]any{"code": req.code, "language": req.lang}
			if req.path == "execute" {
				body = map[string]any{"command": req.code}
			}
			if req.code == "x = 1" {
				body["stateful"] = true
			}
			if r := e.do("POST", "/v1/sessions/"+session+"/"+req.path, agentTok, body); r.status != 200 {
				t.Fatalf("%s: %s %q: %d %s", c.name, req.path, req.code, r.status, r.raw)
			}
		}
		if r := browse(e, session, "navigate", map[string]any{"url": pages.URL + "/"}); r.status != 200 {
			t.Fatalf("%s: navigate: %d %s", c.name, r.status, r.raw)
		}
		if _, live := bm.Live()[key]; !live || len(chromiumUsing(browserDir)) == 0 {
			t.Fatalf("%s: no browser for the session before expiry: %v", c.name, bm.Live())
		}
		var kernels, others int
		var warm subprocess.WarmStats
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			// The warm container is prepared beside the run that asked for it.
			kernels, others = sessionContainers(t, key)
			warm = sp.WarmStats()
			if (kernels == 1 && others >= 1 && warm.Idle+warm.Zygotes >= 1) || time.Now().After(deadline) {
				break
			}
		}
		if kernels != 1 || others < 1 || warm.Idle+warm.Zygotes < 1 {
			t.Fatalf("%s: before expiry: %d kernels, %d other containers, %d warm interpreters and %d zygotes; want 1, ≥1, ≥1",
				c.name, kernels, others, warm.Idle, warm.Zygotes)
		}
		// The timeouts start now, so a loaded machine's slow start-up
		// cannot expire the session before it holds everything.
		if r := e.do("PATCH", "/v1/sessions/"+session, agentTok, c.patch); r.status != 200 {
			t.Fatalf("%s: PATCH %v: %d %s", c.name, c.patch, r.status, r.raw)
		}

		deadline := time.Now().Add(60 * time.Second)
		for {
			r := e.do("GET", "/v1/sessions/"+session, agentTok, nil)
			if r.body["state"] == manager.StateExpired {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never expired: %s", c.name, r.raw)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The engine removes containers in the background.
		for {
			kernels, others = sessionContainers(t, key)
			warm = sp.WarmStats()
			_, browsing := bm.Live()[key]
			chromiums := len(chromiumUsing(browserDir))
			if kernels == 0 && others == 0 && warm.Idle == 0 && warm.Zygotes == 0 && !browsing && chromiums == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after expiry: %d kernels, %d other containers, %d warm interpreters, %d zygotes, browser %v, "+
					"%d Chromium processes; want none", c.name, kernels, others, warm.Idle, warm.Zygotes, browsing, chromiums)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if r := e.do("POST", "/v1/sessions/"+session+"/execute", agentTok, map[string]any{"command": "ls"}); r.status != 404 {
			t.Fatalf("%s: a run on the expired session: %d %s, want 404", c.name, r.status, r.raw)
		}
	}
}

// sessionContainers counts the engine's containers of session: kernels,
// and the others (warm or running).
func sessionContainers(t *testing.T, session string) (kernels, others int) {
	t.Helper()
	cli, err := client.New(client.WithHostFromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	res, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", "sandgate.session="+session)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Items {
		if c.Labels["sandgate.kernel"] == "true" {
			kernels++
		} else {
			others++
		}
	}
	return kernels, others
}
