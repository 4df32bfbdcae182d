package confirm

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
)

// Egress grants (issue 33): an approver answers an HTTP request the egress
// proxy holds ("POST rest.example:443/v1/items") with "POST under this
// path prefix on this host for this session for 30 minutes": a decision
// {"decision": "approve", "scope": "session", "for_s": 1800,
// "path_prefix": "/v1/"}. The approval itself covers the held request
// once; the grant it gives is data the egress policy reads
// (data.sandgate.egress.grant, policy/rego/sandgate/egress/grants.rego)
// when a later request of the session is held, so a request the decision
// denies is never let through by a grant. The grant's id is the covered
// request's approval id in its audit record; the session's end revokes it
// (EndSession), as every session grant.
//
// A grant binds the held request's method, host and port; its prefix must
// cover the held request's path (it or a shorter prefix ending at a
// segment), so an approver widens only what they were shown. Without a
// path_prefix the grant covers the held path and what lies beneath it. A
// connection approval (a CONNECT "host:port" with no request) cannot give
// one: its "session" scope already covers the host for the session.

// ErrGrantPrefix is a path_prefix the held request does not allow.
var ErrGrantPrefix = errcode.New(errcode.InvalidRequest,
	"path_prefix is for an egress request approval given for a session with for_s: it starts with / and is the held request's path or a prefix of it that ends at a segment")

// EgressGrantPolicy is the policy's say on egress grants; EngineGrants
// implements it. A GrantPolicy without it covers no egress request.
type EgressGrantPolicy interface {
	CoveringEgressGrant(ctx context.Context, in policy.EgressInput, live []Grant) (string, error)
}

// egressRequest is a held egress request as its approval's target names it.
type egressRequest struct {
	method, host string
	port         int
	path         string
}

// parseEgressTarget splits the target of a held request, "METHOD
// host:port/path" as the egress proxy writes it (the digest binds it); ok
// is false for a connection's "host:port".
func parseEgressTarget(target string) (egressRequest, bool) {
	method, rest, ok := strings.Cut(target, " ")
	i := strings.IndexByte(rest, '/')
	if !ok || method == "" || i < 0 {
		return egressRequest{}, false
	}
	host, portStr, err := net.SplitHostPort(rest[:i])
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil || host == "" {
		return egressRequest{}, false
	}
	return egressRequest{method: strings.ToUpper(method), host: strings.ToLower(host), port: port, path: rest[i:]}, true
}

// prefixCovers reports whether path is prefix or lies beneath it, as
// grants.rego matches: a prefix ending in "/" covers what starts with it,
// any other itself and what follows it after a "/".
//
// A path or prefix a server could resolve elsewhere covers nothing: one
// with a dot segment, also one with path parameters ("..;", which Tomcat
// and Spring resolve as ".."), or a double-encoded dot or slash
// ("%252e"). The egress proxy refuses such a request before it is held
// (egress.checkPath); this keeps a grant from covering one all the same.
func prefixCovers(prefix, path string) bool {
	if resolvesElsewhere(prefix) || resolvesElsewhere(path) {
		return false
	}
	if path == prefix {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}

// resolvesElsewhere reports whether p has a segment that decodes, up to
// its first ";", to "." or "..", or a "%" left after one decoding before
// an encoded ".", "/" or "\", or is not valid percent-encoding.
func resolvesElsewhere(p string) bool {
	dec, err := url.PathUnescape(p)
	if err != nil {
		return true
	}
	low := strings.ToLower(dec)
	if strings.Contains(low, "%2e") || strings.Contains(low, "%2f") || strings.Contains(low, "%5c") {
		return true
	}
	for _, part := range strings.FieldsFunc(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
		if name, _, _ := strings.Cut(part, ";"); name == "." || name == ".." {
			return true
		}
	}
	return false
}

// egressScope checks an egress grant decision: approved, on a held
// request, for a session, for_s in bounds, and a prefix that covers the
// held path. The approval's own scope is "once": the grant covers the
// later requests, and only while it lives.
func (g *Grants) egressScope(v View, status string, d Decision) (string, error) {
	if status != StatusApproved || d.Scope != ScopeSession {
		if d.PathPrefix != "" {
			return "", ErrGrantPrefix
		}
		return "", ErrGrantDuration
	}
	if g == nil {
		return "", ErrInvalidScope
	}
	req, ok := parseEgressTarget(v.Target)
	if !ok {
		return "", ErrGrantPrefix
	}
	if d.PathPrefix != "" && (!strings.HasPrefix(d.PathPrefix, "/") || !prefixCovers(d.PathPrefix, req.path)) {
		return "", ErrGrantPrefix
	}
	if forS := time.Duration(d.ForS) * time.Second; forS < g.opts.MinFor || forS > g.opts.MaxSession {
		return "", ErrGrantDuration
	}
	return ScopeOnce, nil
}

// giveEgress records the egress grant an approval of the held request v
// gives (egressScope checked d).
func (g *Grants) giveEgress(ctx context.Context, v View, d Decision, by string) (Grant, error) {
	req, ok := parseEgressTarget(v.Target)
	if !ok {
		return Grant{}, ErrGrantPrefix
	}
	prefix := d.PathPrefix
	if prefix == "" {
		prefix = req.path
	}
	now := time.Now()
	gr := Grant{ID: newGrantID(), Kind: KindEgress, Scope: "session", Tenant: v.Tenant, SessionID: v.SessionID,
		Patterns: []string{}, ApprovalID: v.ID, CreatedBy: by, CreatedAt: now, ExpiresAt: now.Add(time.Duration(d.ForS) * time.Second),
		Method: req.method, Host: req.host, Port: req.port, PathPrefix: prefix}
	if err := g.store.insert(ctx, gr); err != nil {
		return Grant{}, fmt.Errorf("confirm: record grant: %w", err)
	}
	g.audit(ctx, AuditGrantCreated, gr, by, map[string]string{"approval_id": v.ID, "expires_at": fmtTime(gr.ExpiresAt),
		"scope": gr.Scope, "kind": KindEgress, "method": gr.Method, "host": gr.Host, "port": strconv.Itoa(gr.Port),
		"path_prefix": gr.PathPrefix})
	g.log.InfoContext(ctx, "egress grant given", "grant_id", gr.ID, "tenant", gr.Tenant, "session_id", gr.SessionID,
		"method", gr.Method, "host", gr.Host, "port", gr.Port, "path_prefix", gr.PathPrefix, "by", by, "expires_at", gr.ExpiresAt)
	return gr, nil
}

// decideWithGrant runs resolve (the decision on v) with the grant it
// gives. An egress grant is recorded first, so that the held request,
// which the resolution lets go, finds it for the session's next request
// (an agent's next call can follow at once); when it cannot be recorded
// the approval stays pending and the approver is told, and when the
// decision does not stand (another approver's came first) it is revoked.
// Until the approval's row says approved the grant covers nothing
// (approvedOnly), so a reject that wins leaves it unusable even before,
// or without, its revocation.
// A run grant is given after the decision, as withGrant says.
func (h *Hub) decideWithGrant(ctx context.Context, v View, status string, d Decision, by string, resolve func() (View, error)) (View, error) {
	if v.Kind != KindEgress || status != StatusApproved || d.ForS <= 0 {
		fin, err := resolve()
		return h.withGrant(ctx, fin, err, d, by)
	}
	gr, err := h.opts.Grants.giveEgress(context.WithoutCancel(ctx), v, d, by)
	if err != nil {
		return View{}, err
	}
	fin, err := resolve()
	if err != nil {
		if rerr := h.opts.Grants.revokeNow(context.WithoutCancel(ctx), gr, by, "its decision did not stand"); rerr != nil {
			h.log.ErrorContext(ctx, "egress grant of a decision that did not stand not revoked", "grant_id", gr.ID, "err", rerr)
		}
		return fin, err
	}
	fin.Grant = &gr
	return fin, nil
}

// coveringEgress asks the egress policy which of live covers req. A
// request without its decision input (req.Egress) is covered by none, and
// only grants whose approval is recorded approved are offered.
func (g *Grants) coveringEgress(ctx context.Context, req Request, live []Grant) (string, error) {
	ep, ok := g.opts.Policy.(EgressGrantPolicy)
	if !ok || req.Egress == nil || req.Egress.HTTP == nil {
		return "", nil
	}
	live, err := g.store.approvedOnly(ctx, live)
	if err != nil {
		return "", err
	}
	return ep.CoveringEgressGrant(ctx, *req.Egress, live)
}

// approvedOnly keeps the grants of gs whose approval's row says
// "approved" (and those given by no approval). An egress grant is
// recorded before its approval's decision (decideWithGrant), so that the
// held request, once let go, finds it; until the approval row is approved
// it covers nothing, and if another approver's reject wins it never does,
// whether or not its revocation is then written. The row and the grant
// are in one database (the audit database), so there is no window.
func (s grantStore) approvedOnly(ctx context.Context, gs []Grant) ([]Grant, error) {
	var ids []any
	for _, gr := range gs {
		if gr.ApprovalID != "" {
			ids = append(ids, gr.ApprovalID)
		}
	}
	if len(ids) == 0 {
		return gs, nil
	}
	q := `SELECT id FROM approvals WHERE status = 'approved' AND id IN (?` + strings.Repeat(`, ?`, len(ids)-1) + `)`
	rows, err := s.db.DB().QueryContext(ctx, s.db.Rebind(q), ids...)
	if err != nil {
		return nil, fmt.Errorf("confirm: read grants' approvals: %w", err)
	}
	defer rows.Close()
	approved := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("confirm: read grants' approvals: %w", err)
		}
		approved[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("confirm: read grants' approvals: %w", err)
	}
	out := make([]Grant, 0, len(gs))
	for _, gr := range gs {
		if gr.ApprovalID == "" || approved[gr.ApprovalID] {
			out = append(out, gr)
		}
	}
	return out, nil
}

// CoveringEgressGrant implements EgressGrantPolicy.
func (e engineGrants) CoveringEgressGrant(ctx context.Context, in policy.EgressInput, live []Grant) (string, error) {
	gs := make([]policy.EgressGrant, len(live))
	for i, g := range live {
		gs[i] = policy.EgressGrant{ID: g.ID, Scope: g.Scope, Tenant: g.Tenant, SessionID: g.SessionID, Method: g.Method,
			Host: g.Host, Port: g.Port, PathPrefix: g.PathPrefix, ExpiresAt: g.ExpiresAt}
	}
	return e.eng.CoveringEgressGrant(ctx, in, gs)
}
