package browser

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/workspace"
)

// Decider is the policy engine as the router uses it.
type Decider interface {
	DecideBrowser(ctx context.Context, in policy.BrowserInput) policy.BrowserDecision
}

// Resolver looks up a host's addresses; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Decision layers, as audit records name them.
const (
	layerAction = "action" // the URL the agent typed, before it is handed to the browser
	layerFetch  = "fetch"  // a request the page made, paused by CDP Fetch interception
	layerProxy  = "proxy"  // a connection the external browser asked the gateway's proxy for
)

// ticketTTL is how long an allow decision of the Fetch layer may be reused
// by the proxy for the same host and port, dialling exactly the addresses
// that were checked.
const ticketTTL = 30 * time.Second

// maxBlocked caps the blocked requests an action reports back.
const maxBlocked = 20

// Blocked is one request the policy refused while an action ran.
type Blocked struct {
	// URL is the request's scheme, host and port only: paths and queries
	// can carry tokens, and the agent has the full URL in its own page.
	URL          string          `json:"url"`
	ResourceType string          `json:"resource_type,omitempty"`
	Navigation   bool            `json:"navigation"`
	Layer        string          `json:"layer"`
	Reasons      []policy.Reason `json:"reasons"`

	frameID string
}

// Warning is one request the policy let through only because the reasons
// that would have refused it are in warn mode: the agent is told which
// rules it would have run into (Reasons are the warn ones). Requests let
// through by dryrun reasons are not reported to the agent; their audit
// records and decision-log events carry would_be.
type Warning struct {
	URL          string          `json:"url"`
	ResourceType string          `json:"resource_type,omitempty"`
	Navigation   bool            `json:"navigation"`
	Layer        string          `json:"layer"`
	Reasons      []policy.Reason `json:"reasons"`
}

// verdict is one decision with the addresses it was made on.
type verdict struct {
	decision policy.BrowserDecision
	addrs    []netip.Addr
}

type ticket struct {
	addrs   []netip.Addr
	expires time.Time
}

// guard decides the requests of one browser instance. The Fetch handler
// and the proxy share it, so that both see the same resolution, and the
// proxy can connect to exactly the addresses the Fetch layer checked.
type guard struct {
	cfg       *Config
	policy    Decider
	resolver  Resolver
	rec       *recorder
	sessionID string
	backend   string

	mu      sync.Mutex
	tickets map[string]ticket // "host:port" → addresses an allow decision was made on
	lookups map[string]lookup // host → recent answer, so both layers decide on one resolution
	action  *actionState      // the action in progress, if any
	typed   *typedURL         // the navigation the agent asked for, decided before the browser saw it
}

// typedURL is the decision already made on a navigation's URL: the Fetch
// layer reuses it (once, for that exact URL, as the main frame's document)
// instead of evaluating the same input again on the page's critical path.
type typedURL struct {
	raw     string
	v       verdict
	expires time.Time
}

// expect hands the guard the decision made on the URL about to be
// navigated to.
func (g *guard) expect(raw string, v verdict) {
	g.mu.Lock()
	g.typed = &typedURL{raw: raw, v: v, expires: time.Now().Add(ticketTTL)}
	g.mu.Unlock()
}

// takeTyped returns the typed URL's decision for t, once.
func (g *guard) takeTyped(t target) (verdict, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tu := g.typed
	if tu == nil || !t.navigation || t.method != "GET" || t.raw != tu.raw || time.Now().After(tu.expires) {
		return verdict{}, false
	}
	g.typed = nil
	return tu.v, true
}

// lookup is one cached resolution.
type lookup struct {
	addrs   []netip.Addr
	expires time.Time
}

// Resolution cache bounds: a page's burst of requests to one host costs one
// lookup, and the typed URL, its Fetch pause and the proxy's connection see
// the same answer.
const (
	lookupTTL  = 5 * time.Second
	maxLookups = 256
	maxTickets = 1024
)

// actionState collects what happened to the page while one action ran.
type actionState struct {
	requestID string
	blocked   []Blocked
	dropped   int
	// warnings are the action's requests allowed with warn reasons, at
	// most maxBlocked of them.
	warnings []Warning
	// allowed holds the allow records of the action's requests, written
	// together with the action's own record when it ends (one group commit
	// instead of one per request on the action's path). Denials are never
	// held back.
	allowed []*audit.Record
}

// maxHeldRecords bounds the allow records one action holds back; past it
// they are written at once.
const maxHeldRecords = 256

func newGuard(cfg *Config, p Decider, res Resolver, rec *recorder, sessionID, backend string) *guard {
	return &guard{cfg: cfg, policy: p, resolver: res, rec: rec, sessionID: sessionID, backend: backend,
		tickets: make(map[string]ticket), lookups: make(map[string]lookup)}
}

// begin marks the start of an action: decisions until end are attributed
// to requestID, and blocked requests are collected for the result.
func (g *guard) begin(requestID string) {
	g.mu.Lock()
	g.action = &actionState{requestID: requestID}
	g.mu.Unlock()
}

// end returns what the action saw and detaches it.
func (g *guard) end() *actionState {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.action
	g.action = nil
	if a == nil {
		a = &actionState{}
	}
	return a
}

// target is one request to decide.
type target struct {
	raw          string // full URL, for the policy only; never audited
	scheme       string
	host         string // without brackets
	port         int
	method       string
	resourceType string
	navigation   bool
	frameID      string
}

// targetOf parses a URL the browser is about to load. Schemes without an
// authority (file:, data:, javascript:, about:, chrome:) have no host.
func targetOf(raw string) (target, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return target{raw: raw}, false
	}
	t := target{raw: raw, scheme: strings.ToLower(u.Scheme), host: normHost(u.Hostname())}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return t, false
		}
		t.port = n
	} else {
		t.port = defaultPort(t.scheme)
	}
	return t, true
}

// normHost is the host as the policy sees it: lower case, without the
// trailing dot of a fully qualified name ("localhost." is "localhost",
// so a blocked_hosts pattern cannot be sidestepped with it).
func normHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func defaultPort(scheme string) int {
	switch scheme {
	case "http", "ws":
		return 80
	case "https", "wss":
		return 443
	}
	return 0
}

// policyScheme maps WebSocket schemes to the HTTP scheme of their handshake:
// the policy's scheme rules are about which network protocols the browser
// may speak, and ws(s) is an upgraded http(s) request.
func policyScheme(s string) string {
	switch s {
	case "ws":
		return "http"
	case "wss":
		return "https"
	}
	return s
}

// origin is what audit records and results show of a URL.
func (t target) origin() string {
	if t.host == "" {
		return t.scheme + ":"
	}
	return t.scheme + "://" + net.JoinHostPort(t.host, strconv.Itoa(t.port))
}

func (t target) hostPort() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// decide resolves the host (external backend), asks the policy, and
// records the decision. Errors never allow: a failed lookup is an empty
// address list, which the policy denies unless the host is allowlisted,
// and the engine turns its own failures into deny.
func (g *guard) decide(ctx context.Context, t target, layer string) verdict {
	if layer == layerFetch {
		if v, ok := g.takeTyped(t); ok {
			g.allowed(t, layer, v)
			g.record(t, layer, v)
			return v
		}
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DecisionTimeout)
	defer cancel()
	var v verdict
	if g.backend == BackendExternal && t.host != "" && isNetworkScheme(t.scheme) {
		v.addrs = g.resolve(ctx, t.host)
	}
	tenant, _ := workspace.SplitKey(g.sessionID)
	in := policy.BrowserInput{
		Mode: g.cfg.Mode, SessionID: g.sessionID, Tenant: tenant, Backend: g.backend,
		Request: policy.BrowserRequest{
			URL: t.raw, Scheme: policyScheme(t.scheme), Host: t.host, Port: t.port, Method: t.method,
			ResourceType: t.resourceType, Navigation: t.navigation,
		},
		Resolved:   addrStrings(v.addrs),
		AllowHosts: g.cfg.AllowHosts,
	}
	v.decision = g.policy.DecideBrowser(ctx, in)
	g.allowed(t, layer, v)
	g.record(t, layer, v)
	return v
}

// allowed issues the proxy a ticket for an allow of the Fetch layer.
func (g *guard) allowed(t target, layer string, v verdict) {
	if !v.decision.Allowed() || layer != layerFetch || g.backend != BackendExternal || t.host == "" {
		return
	}
	g.mu.Lock()
	if len(g.tickets) >= maxTickets {
		clear(g.tickets)
	}
	g.tickets[t.hostPort()] = ticket{addrs: v.addrs, expires: time.Now().Add(ticketTTL)}
	g.mu.Unlock()
}

// ticketFor returns the addresses a recent Fetch-layer allow was made on
// for host:port, if any.
func (g *guard) ticketFor(hostPort string) ([]netip.Addr, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tk, ok := g.tickets[hostPort]
	if !ok {
		return nil, false
	}
	if time.Now().After(tk.expires) {
		delete(g.tickets, hostPort)
		return nil, false
	}
	return tk.addrs, true
}

func isNetworkScheme(s string) bool {
	switch s {
	case "http", "https", "ws", "wss":
		return true
	}
	return false
}

// resolve returns the host's addresses, IPv4-mapped IPv6 unmapped, or
// none. An IP literal is its own answer.
func (g *guard) resolve(ctx context.Context, host string) []netip.Addr {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}
	}
	now := time.Now()
	g.mu.Lock()
	if l, ok := g.lookups[host]; ok && now.Before(l.expires) {
		g.mu.Unlock()
		return l.addrs
	}
	g.mu.Unlock()
	addrs, err := g.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil // not cached: a transient failure is retried next time
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.Unmap())
	}
	g.mu.Lock()
	if len(g.lookups) >= maxLookups {
		clear(g.lookups)
	}
	g.lookups[host] = lookup{addrs: out, expires: now.Add(lookupTTL)}
	g.mu.Unlock()
	return out
}

func addrStrings(as []netip.Addr) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

// record audits one decision, and notes a denial for the running action.
// The record holds the origin (scheme, host, port), never the path, query,
// headers, cookies or page content.
func (g *guard) record(t target, layer string, v verdict) {
	rec := &audit.Record{
		Kind: KindRequest, SessionID: g.sessionID,
		Action: v.decision.Action, Executor: "browser." + g.backend, Reasons: auditReasons(v.decision.Reasons),
		PolicyRevision: v.decision.PolicyRevision, DecisionID: v.decision.DecisionID, WouldBe: v.decision.WouldBe,
		Outcome: audit.OutcomeOK,
		Detail:  map[string]string{"layer": layer, "backend": g.backend, "scheme": t.scheme},
	}
	if !v.decision.Allowed() {
		rec.Outcome = audit.OutcomeDenied
		rec.ErrorCode = "policy_denied"
	}
	if t.host != "" {
		rec.Detail["host"] = t.host
		rec.Detail["port"] = strconv.Itoa(t.port)
	}
	if t.resourceType != "" {
		rec.Detail["resource_type"] = t.resourceType
	}
	if t.navigation {
		rec.Detail["navigation"] = "true"
	}
	if len(v.addrs) > 0 {
		rec.Detail["resolved"] = strings.Join(addrStrings(v.addrs), ",")
	}

	g.mu.Lock()
	if a := g.action; a != nil {
		rec.RequestID = a.requestID
		if w := v.decision.Warnings(); len(w) > 0 && v.decision.Allowed() {
			a.warn(Warning{URL: t.origin(), ResourceType: t.resourceType, Navigation: t.navigation, Layer: layer, Reasons: w})
		}
		switch {
		case v.decision.Allowed() && len(a.allowed) < maxHeldRecords:
			a.allowed = append(a.allowed, rec)
			g.mu.Unlock()
			return
		case !v.decision.Allowed() && len(a.blocked) < maxBlocked:
			a.blocked = append(a.blocked, Blocked{URL: t.origin(), ResourceType: t.resourceType, Navigation: t.navigation,
				Layer: layer, Reasons: v.decision.Reasons, frameID: t.frameID})
		case !v.decision.Allowed():
			a.dropped++
		}
	}
	g.mu.Unlock()
	g.rec.append(rec, !v.decision.Allowed())
}

// warn notes w for the action, once per origin, kind of request and
// reasons (a page's many requests to one host, or a navigation decided at
// the action and again when the browser loads it, are one warning), up to
// maxBlocked. The caller holds g.mu.
func (a *actionState) warn(w Warning) {
	for _, o := range a.warnings {
		if o.URL == w.URL && o.Navigation == w.Navigation && sameCodes(o.Reasons, w.Reasons) {
			return
		}
	}
	if len(a.warnings) < maxBlocked {
		a.warnings = append(a.warnings, w)
	}
}

func sameCodes(a, b []policy.Reason) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Code != b[i].Code {
			return false
		}
	}
	return true
}

func auditReasons(rs []policy.Reason) []audit.Reason {
	if len(rs) == 0 {
		return nil
	}
	out := make([]audit.Reason, len(rs))
	for i, r := range rs {
		out[i] = audit.Reason{Code: r.Code, Message: r.Message, Enforcement: r.Enforcement}
	}
	return out
}
