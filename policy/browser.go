package policy

import (
	"context"
	"fmt"
	"net/url"

	"github.com/open-policy-agent/opa/v1/rego"
)

// BrowserInput is one request a session's browser is about to make: the
// typed URL, a redirect hop or a sub-resource.
type BrowserInput struct {
	Mode      string
	SessionID string
	// Tenant owns the session: enforcement modes may be set per tenant
	// (config.enforcement.tenants), as for runs.
	Tenant string
	// Backend is "external" (Chromium on the gateway host) or "aio" (the
	// browser inside the session's sandbox container).
	Backend string
	Request BrowserRequest
	// Resolved are the addresses the gateway resolved for Request.Host and
	// will connect to (IPv4-mapped IPv6 given as IPv4). Checking these, not
	// the name, is what keeps DNS rebinding out.
	Resolved []string
	// AllowHosts is the gateway's configured allowlist ("host" or
	// "host:port").
	AllowHosts []string
}

// BrowserRequest describes the URL.
type BrowserRequest struct {
	URL          string
	Scheme       string
	Host         string
	Port         int
	Method       string
	ResourceType string
	Navigation   bool
}

// BrowserDecision allows or denies one browser request.
type BrowserDecision struct {
	Action         string   `json:"action"`
	Reasons        []Reason `json:"reasons"`
	PolicyRevision string   `json:"policy_revision"`
	// DecisionID is as in Decision.
	DecisionID string `json:"decision_id,omitempty"`
	// WouldBe is "deny" when the request was allowed only because its
	// reasons are in dryrun or warn mode; empty otherwise. The audit
	// record and the decision log show it.
	WouldBe string `json:"would_be,omitempty"`
}

// Allowed reports whether the request may proceed.
func (d BrowserDecision) Allowed() bool { return d.Action == ActionAllow }

// Warnings are the reasons in warn mode: what the agent is told about
// rules that would have refused the request.
func (d BrowserDecision) Warnings() []Reason {
	var out []Reason
	for _, r := range d.Reasons {
		if r.Enforcement == EnforcementWarn {
			out = append(out, r)
		}
	}
	return out
}

// Map builds the OPA input.
func (in BrowserInput) Map() map[string]any {
	return map[string]any{
		"mode":       in.Mode,
		"session_id": in.SessionID,
		"tenant":     in.Tenant,
		"backend":    in.Backend,
		"request": map[string]any{
			"url": in.Request.URL, "scheme": in.Request.Scheme, "host": in.Request.Host, "port": in.Request.Port,
			"method": in.Request.Method, "resource_type": in.Request.ResourceType, "navigation": in.Request.Navigation,
		},
		"resolved":    strings2any(in.Resolved),
		"allow_hosts": strings2any(in.AllowHosts),
	}
}

func strings2any(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// DecideBrowser evaluates data.sandgate.browser.decision. Like Decide it
// never errors: every failure, and a tree without the browser package, is a
// deny. It is logged like Decide.
func (e *Engine) DecideBrowser(ctx context.Context, in BrowserInput) BrowserDecision {
	c := e.cur.Load()
	input := in.Map()
	d := e.decideBrowser(ctx, c, input)
	d.DecisionID = newDecisionID()
	e.shadowBrowser(ctx, input, d)
	e.logDecision(logEvent{id: d.DecisionID, path: browserLogPath, input: in.logged().Map(), result: d, c: c})
	return d
}

// logged is the input as the decision log gets it: the URL without its
// query and fragment, where signed URLs, OAuth codes and tokens travel.
// The policy decided on the whole URL; the log says where it went.
func (in BrowserInput) logged() BrowserInput {
	if u, err := url.Parse(in.Request.URL); err == nil && (u.RawQuery != "" || u.Fragment != "") {
		u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
		in.Request.URL = u.String()
	} else if err != nil {
		in.Request.URL = ""
	}
	return in
}

func (e *Engine) decideBrowser(ctx context.Context, c *compiled, input map[string]any) BrowserDecision {
	if c == nil {
		return BrowserDecision{Action: ActionDeny, Reasons: []Reason{{Code: ReasonNotLoaded, Message: "no policy is loaded"}}}
	}
	v, failed := e.eval(ctx, c, c.browser, rego.EvalInput(input))
	if failed != nil {
		return BrowserDecision{Action: ActionDeny, Reasons: failed.Reasons, PolicyRevision: c.revision}
	}
	d, err := parseBrowserDecision(v)
	if err != nil {
		e.log.Error("browser decision rejected", "revision", c.revision, "err", err)
		return BrowserDecision{Action: ActionDeny, PolicyRevision: c.revision,
			Reasons: []Reason{{Code: ReasonInvalidDecision, Message: "the policy produced an invalid decision"}}}
	}
	d.PolicyRevision = c.revision
	return d
}

func parseBrowserDecision(v any) (BrowserDecision, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return BrowserDecision{}, fmt.Errorf("%w: not an object", errBadDecision)
	}
	for k := range obj {
		if k != "action" && k != "reasons" && k != "would_be" {
			return BrowserDecision{}, fmt.Errorf("%w: unexpected field %q", errBadDecision, k)
		}
	}
	action, err := str(obj, "action")
	if err != nil {
		return BrowserDecision{}, err
	}
	if action != ActionAllow && action != ActionDeny {
		return BrowserDecision{}, fmt.Errorf("%w: unknown action %q", errBadDecision, action)
	}
	rs, err := reasons(obj["reasons"])
	if err != nil {
		return BrowserDecision{}, err
	}
	d := BrowserDecision{Action: action, Reasons: rs}
	if v, ok := obj["would_be"]; ok {
		// Only an allowed request has something it would have been.
		if wb, _ := v.(string); wb != ActionDeny || action != ActionAllow {
			return BrowserDecision{}, fmt.Errorf("%w: would_be %v on %s", errBadDecision, v, action)
		}
		d.WouldBe = ActionDeny
	}
	return d, nil
}
