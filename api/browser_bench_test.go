package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// benchGateway is the gateway of newEnv (SQLite audit, workspaces, the
// embedded policy, the manager, tokens, the HTTP API) with a browser
// router, assembled for a benchmark (newEnv takes a *testing.T).
func benchGateway(b *testing.B, allow ...string) *httptest.Server {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	// The gateway's default audit durability (synchronous=full: each
	// record fsynced before the response) unless
	// SANDGATE_BENCH_AUDIT_SYNC=normal asks for the cheaper WAL mode.
	st, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{Synchronous: os.Getenv("SANDGATE_BENCH_AUDIT_SYNC")})
	if err != nil {
		b.Fatal(err)
	}
	ws, err := workspace.New(filepath.Join(dir, "workspaces"), workspace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout})
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	mgr, err := manager.New(manager.Config{Mode: "STRICT"}, manager.Deps{
		Assessor: risk.NewAssessor(nil, nil), Policy: eng, Executors: []executors.Executor{},
		Workspaces: ws, Audit: st, Metrics: manager.NewMetrics(reg),
	})
	if err != nil {
		b.Fatal(err)
	}
	auth, err := NewAuth([]Token{NewToken("a", RoleAgent, agentTok), NewToken("root", RoleAdmin, adminTok)})
	if err != nil {
		b.Fatal(err)
	}
	bm := browserFor(b, allow...)(eng, st, ws)
	srv := httptest.NewServer(New(Config{}, Deps{Manager: mgr, Policy: eng, Audit: st, Auth: auth, Gatherer: reg, Browser: bm}))
	b.Cleanup(func() {
		srv.Close()
		_ = st.Close()
	})
	return srv
}

// benchBrowse runs one action and returns its result and its server-side
// duration (the action itself, before its audit record is written).
func benchBrowse(b *testing.B, c *http.Client, base, session, action string, params map[string]any) (map[string]any, time.Duration) {
	body, _ := json.Marshal(map[string]any{"action": action, "params": params})
	req, _ := http.NewRequest("POST", base+"/v1/sessions/"+session+"/browser", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+agentTok)
	res, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		b.Fatalf("%s: %d %s", action, res.StatusCode, raw)
	}
	var out struct {
		Result     map[string]any `json:"result"`
		DurationMS int64          `json:"duration_ms"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		b.Fatal(err)
	}
	return out.Result, time.Duration(out.DurationMS) * time.Millisecond
}

// BenchmarkBrowserNavigateContent compares navigate+content of a local page
// through the gateway (HTTP API, policy on the typed URL, Fetch
// interception, the egress proxy, audit records) with the same two steps
// driven directly with chromedp, in the same run and interleaved, so both
// see the same machine load. It reports both medians and their ratio
// (target: p50_ratio ≤ 1.2), and the median of the two actions' own
// server-side time (gateway_actions_p50_ms: no HTTP, no audit write).
//
//	go test -run '^$' -bench BrowserNavigateContent -benchtime 200x ./api/
//	SANDGATE_BENCH_AUDIT_SYNC=normal go test -run '^$' -bench BrowserNavigateContent -benchtime 200x ./api/
func BenchmarkBrowserNavigateContent(b *testing.B) {
	path := requireBrowser(b)
	pages := testPages(b)
	gw := benchGateway(b, hostPort(pages.URL))
	client := gw.Client()

	// The direct baseline: a headless Chromium with the same basic flags
	// and no resolver (nothing leaves the host), driven over its pipe.
	dataDir, err := os.MkdirTemp("", "sgbd-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dataDir)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.NoFirstRun, chromedp.DisableGPU,
		chromedp.UserDataDir(dataDir), chromedp.WindowSize(1024, 700),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"))
	defer cancelAlloc()
	dctx, cancelDirect := chromedp.NewContext(actx)
	defer cancelDirect()
	if err := chromedp.Do(dctx); err != nil {
		b.Fatal(err)
	}
	direct := func(u string) {
		if _, err := chromedp.Run(dctx, chromedp.NavigateResponse(u)); err != nil {
			b.Fatal(err)
		}
		if _, err := chromedp.Run(dctx, chromedp.Evaluate[string](`document.body.innerText`)); err != nil {
			b.Fatal(err)
		}
	}
	viaGateway := func(u string) time.Duration {
		_, nav := benchBrowse(b, client, gw.URL, "bench", "navigate", map[string]any{"url": u})
		got, content := benchBrowse(b, client, gw.URL, "bench", "content", nil)
		if len(got["content"].(string)) < 1000 {
			b.Fatalf("content %v", got)
		}
		return nav + content
	}
	for i := range 5 { // warm up both: browser start, first paint, caches
		viaGateway(fmt.Sprintf("%s/article?w=%d", pages.URL, i))
		direct(fmt.Sprintf("%s/article?w=%d", pages.URL, i))
	}

	var gTimes, dTimes, aTimes []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		u := fmt.Sprintf("%s/article?i=%d", pages.URL, i)
		t0 := time.Now()
		actions := viaGateway(u)
		t1 := time.Now()
		direct(u)
		t2 := time.Now()
		gTimes = append(gTimes, t1.Sub(t0))
		aTimes = append(aTimes, actions)
		dTimes = append(dTimes, t2.Sub(t1))
	}
	b.StopTimer()
	g, d := median(gTimes), median(dTimes)
	b.ReportMetric(float64(g.Microseconds())/1000, "gateway_p50_ms")
	b.ReportMetric(float64(d.Microseconds())/1000, "direct_p50_ms")
	b.ReportMetric(float64(g)/float64(d), "p50_ratio")
	// The two actions inside the gateway, without HTTP and the audit
	// write: what the browser layers (policy, Fetch interception, proxy)
	// cost on their own.
	b.ReportMetric(float64(median(aTimes).Microseconds())/1000, "gateway_actions_p50_ms")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
