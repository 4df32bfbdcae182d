package policy

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// roundTrip is v as a raw JSON document.
func roundTrip(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckInputDecidesAsTheGateway: the inputs the gateway builds, as
// raw documents, are valid under their schemas, their kind is detected,
// and CheckInput decides them as Decide, DecideBrowser and DecideEgress
// do, without a decision_id.
func TestCheckInputDecidesAsTheGateway(t *testing.T) {
	e := newEngine(t, Options{})
	ctx := context.Background()
	critical := baseInput("STRICT", "CRITICAL", false)
	browser := browserInput("http://127.0.0.1:8080/v1/policy", "http", "127.0.0.1", 8080, "127.0.0.1")
	browser.Tenant = "acme"
	egress := EgressInput{Mode: "STRICT", Host: "localhost", Port: 80, Scheme: "http", SessionID: "s", Tenant: "t", Resolved: []string{"127.0.0.1"}}
	cases := []struct {
		kind   string
		doc    map[string]any
		action string
		code   string
	}{
		{CheckExec, critical.Map(), e.Decide(ctx, critical).Action, e.Decide(ctx, critical).Reasons[0].Code},
		{CheckBrowser, browser.Map(), ActionDeny, "browser.blocked_address"},
		{CheckEgress, egress.Map(), e.DecideEgress(ctx, egress).Action, e.DecideEgress(ctx, egress).Reasons[0].Code},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			for _, kind := range []string{c.kind, ""} {
				got, err := e.CheckInput(ctx, kind, roundTrip(t, c.doc))
				if err != nil {
					t.Fatalf("kind %q: %v", kind, err)
				}
				if got.Kind != c.kind {
					t.Fatalf("detected %s, want %s", got.Kind, c.kind)
				}
				var action, code, id string
				switch d := got.Decision.(type) {
				case Decision:
					action, code, id = d.Action, d.Reasons[0].Code, d.DecisionID
				case BrowserDecision:
					action, code, id = d.Action, d.Reasons[0].Code, d.DecisionID
				case EgressDecision:
					action, code, id = d.Action, d.Reasons[0].Code, d.DecisionID
				}
				if action != c.action || code != c.code || id != "" {
					t.Fatalf("decision %+v, want %s %s", got.Decision, c.action, c.code)
				}
			}
		})
	}
}

func TestCheckInputRefusesBadDocuments(t *testing.T) {
	e := newEngine(t, Options{})
	exec := baseInput("STRICT", "LOW", false).Map()
	withExtra := roundTrip(t, map[string]any{"mode": "STRICT", "request": exec["request"], "risk": exec["risk"],
		"principal": exec["principal"], "executors": exec["executors"], "code": "print(1)"})
	for _, c := range []struct{ name, kind, doc, want string }{
		{"not JSON", "", `{"mode":`, "unexpected EOF"},
		{"not an object", "", `[1]`, "cannot unmarshal array"},
		{"null", "", `null`, "want a JSON object"},
		{"two values", "", `{} {}`, "more than one JSON value"},
		{"unknown decision", "grants", `{}`, `unknown decision "grants"`},
		{"no schema fits", "", `{"mode": "STRICT"}`, "valid under no input schema"},
		{"field the gateway never sends", CheckExec, string(withExtra), `additional properties ["code"]`},
		{"wrong type", CheckBrowser, strings.Replace(string(roundTrip(t, browserInput("https://e.com/", "https", "e.com", 443).Map())), `"port":443`, `"port":"443"`, 1), "port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.CheckInput(context.Background(), c.kind, []byte(c.doc))
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrBadInput mentioning %q", err, c.want)
			}
		})
	}
}
