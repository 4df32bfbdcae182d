package browser

import (
	"context"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// formsPolicy is the shipped policy plus an administrator's rule being
// rolled out: form submissions (/submit) are refused. It runs in dryrun
// everywhere, tenant "acme" is in warn mode, and tenant "strict" enforces
// everything (the stricter mode wins).
func formsPolicy(t *testing.T) fstest.MapFS {
	t.Helper()
	tree, err := policy.DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	tree["sandgate/browser/forms.rego"] = &fstest.MapFile{Data: []byte(`package sandgate.browser

deny_reasons contains reason("browser.forms", "form submissions are off limits") if contains(input.request.url, "/submit")
`)}
	tree["sandgate/config/enforcement/data.json"] = &fstest.MapFile{Data: []byte(
		`{"rules": {"browser.forms": "dryrun"}, "tenants": {"acme": "warn", "strict": "enforce"}}`)}
	return tree
}

// TestBrowserEnforcementModes drives a real browser under a policy whose
// new rule is in dryrun or warn: the page loads in both, the audit
// records the would-be denial, only the warn tenant's response tells the
// agent, and an enforcing tenant is refused as before.
func TestBrowserEnforcementModes(t *testing.T) {
	p := newPages(t)
	h := newHarness(t, harnessOpts{allow: []string{p.hostPort()}, policy: formsPolicy(t)})
	submit := p.URL + "/submit?name=Ada"

	t.Run("enforced", func(t *testing.T) {
		_, err := h.do("strict~s", ActionNavigate, map[string]any{"url": submit})
		if d, ok := isDenied(err); !ok || d.Reasons[0].Code != "browser.forms" {
			t.Fatalf("err = %v, want browser.forms denied", err)
		}
	})

	t.Run("dryrun", func(t *testing.T) {
		res := h.must("dry", ActionNavigate, map[string]any{"url": submit})
		if res.Data.(PageResult).Title != "Result" || len(res.Warnings) != 0 || len(res.Blocked) != 0 {
			t.Fatalf("dry run: %+v", res)
		}
		got := h.must("dry", ActionContent, map[string]any{"selector": "#result"}).Data.(ContentResult)
		if got.Content != "Hello, Ada!" {
			t.Fatalf("the page did not run: %q", got.Content)
		}
		wouldBe(t, h, "", "dry", policy.EnforcementDryrun)
	})

	t.Run("warn", func(t *testing.T) {
		res := h.must("acme~w", ActionNavigate, map[string]any{"url": p.URL + "/"})
		if len(res.Warnings) != 0 {
			t.Fatalf("warnings on a page no rule refuses: %+v", res.Warnings)
		}
		// The form's submission is a navigation the page makes: the Fetch
		// layer decides it, and the agent is told once.
		h.must("acme~w", ActionType, map[string]any{"selector": "#name", "text": "Ada"})
		res = h.must("acme~w", ActionClick, map[string]any{"selector": "#go", "wait_navigation": true})
		if len(res.Warnings) != 1 || res.Warnings[0].URL != "http://"+p.hostPort() || !res.Warnings[0].Navigation ||
			res.Warnings[0].Layer != layerFetch || res.Warnings[0].Reasons[0].Code != "browser.forms" ||
			res.Warnings[0].Reasons[0].Enforcement != policy.EnforcementWarn {
			t.Fatalf("click warnings = %+v", res.Warnings)
		}
		res = h.must("acme~w", ActionNavigate, map[string]any{"url": submit})
		if len(res.Warnings) != 1 || res.Warnings[0].Layer != layerAction {
			t.Fatalf("typed URL warnings = %+v (one, from the action's own decision)", res.Warnings)
		}
		wouldBe(t, h, "acme", "w", policy.EnforcementWarn)
	})
}

// wouldBe checks that the session's records show the would-be denial: a
// browser.request record allowed with would_be deny and the rule's reason
// in its mode, and the typed navigation's action record likewise. Allow
// records are written in the background once the session is idle, so it
// waits for them (up to 10 s).
func wouldBe(t *testing.T, h *harness, tenant, session, mode string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		requests, actions := wouldBeRecords(t, h, tenant, session, mode)
		if requests > 0 && actions == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d request and %d action records with would_be (want some, and one)", requests, actions)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wouldBeRecords(t *testing.T, h *harness, tenant, session, mode string) (requests, actions int) {
	t.Helper()
	page, err := h.audit.Query(context.Background(), audit.Query{Tenant: tenant, SessionID: session, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Records {
		if r.WouldBe == "" {
			continue
		}
		if r.Action != policy.ActionAllow || r.WouldBe != policy.ActionDeny {
			t.Fatalf("record %s: action %s would be %s", r.Kind, r.Action, r.WouldBe)
		}
		switch r.Kind {
		case KindRequest:
			if len(r.Reasons) != 1 || r.Reasons[0].Code != "browser.forms" || r.Reasons[0].Enforcement != mode || r.DecisionID == "" {
				t.Fatalf("request record %+v", r)
			}
			requests++
		case KindAction:
			actions++
		}
	}
	return requests, actions
}
