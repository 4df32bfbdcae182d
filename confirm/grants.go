package confirm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

// Grants: an approver's answer that remembers. Approving a run "for this
// session for N minutes" (ScopeSession) or "for this pattern in this
// tenant for N hours" (ScopePattern) records a grant; a later request held
// for approval is first put to the policy with the tenant's live grants
// (input.grants, data.sandgate.exec.grant), and runs without a prompt
// when the policy names one. The grant's id is the run's approval id in
// its audit record. Grants expire, can be revoked, and are kept in the
// approvals database, so they survive a restart and are shared by
// replicas.

// ScopePattern approves, for a while, every request of the tenant whose
// risk patterns are among the approved request's (a run approval only).
const ScopePattern = "pattern"

// ScopeGrant is an Outcome's scope when a grant, not a person, answered.
const ScopeGrant = "grant"

// Bounds of a grant's lifetime, the grants a channel's buttons give (the
// page's too), and the audit kinds of a grant's changes.
const (
	SessionGrantFor        = 30 * time.Minute
	PatternGrantFor        = 8 * time.Hour
	DefaultMaxSessionGrant = 24 * time.Hour
	DefaultMaxPatternGrant = 7 * 24 * time.Hour
	AuditGrantCreated      = "grant.created"
	AuditGrantRevoked      = "grant.revoked"
)

var (
	ErrGrantNotFound = errcode.New(errcode.NotFound, "no such grant")
	ErrGrantRevoked  = errcode.New(errcode.Conflict, "the grant was already revoked")
	ErrGrantDuration = errcode.New(errcode.InvalidRequest,
		"for_s must be between 60 and the scope's maximum (a session grant 24 h, a pattern grant 7 days)")
)

// Grant is one standing approval.
type Grant struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Scope is "session" (SessionID of Tenant) or "tenant" (every
	// session of Tenant; given through ScopePattern).
	Scope     string `json:"scope"`
	Tenant    string `json:"tenant"`
	SessionID string `json:"session_id,omitempty"`
	Language  string `json:"language"`
	// Level is the risk level approved; Patterns the risk pattern ids.
	Level      string    `json:"risk_level"`
	Patterns   []string  `json:"patterns"`
	ApprovalID string    `json:"approval_id"`
	CreatedBy  string    `json:"created_by"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	RevokedBy  string    `json:"revoked_by,omitempty"`
	RevokedAt  time.Time `json:"revoked_at,omitzero"`
	Uses       int64     `json:"uses"`
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
	// Method, Host, Port and PathPrefix are the requests an egress grant
	// (Kind egress) covers; empty on a run grant.
	Method     string `json:"method,omitempty"`
	Host       string `json:"host,omitempty"`
	Port       int    `json:"port,omitempty"`
	PathPrefix string `json:"path_prefix,omitempty"`
}

// GrantFor is how long a channel's grant of scope lasts.
func GrantFor(scope string) time.Duration {
	if scope == ScopePattern {
		return PatternGrantFor
	}
	return SessionGrantFor
}

// Live reports whether g can still cover a request at now.
func (g Grant) Live(now time.Time) bool { return g.RevokedAt.IsZero() && now.Before(g.ExpiresAt) }

// GrantPolicy is the policy's say on grants: which of live, if any,
// covers req (held for approval). "" means none, and a person is asked.
type GrantPolicy interface {
	CoveringGrant(ctx context.Context, req Request, live []Grant) (string, error)
	// GrantMisses says why each of live does not cover req (grant id to
	// reasons; none for one that covers it).
	GrantMisses(ctx context.Context, req Request, live []Grant) (map[string][]string, error)
}

// GrantOptions configure OpenGrants.
type GrantOptions struct {
	// Store is the approvals database; the grants table lives there.
	Store Store
	// Policy decides which grant covers a request. Required.
	Policy GrantPolicy
	// Audit receives grant.created and grant.revoked records; nil keeps
	// none (tests).
	Audit  audit.Store
	Logger *slog.Logger
	// MaxSession and MaxPattern bound for_s of each scope. Defaults
	// DefaultMaxSessionGrant and DefaultMaxPatternGrant.
	MaxSession, MaxPattern time.Duration
	// MinFor is the shortest grant; default a minute (tests shorten it
	// to watch one expire).
	MinFor time.Duration
}

// Grants is the book of grants.
type Grants struct {
	opts  GrantOptions
	store grantStore
	log   *slog.Logger
}

// OpenGrants creates or migrates the grants table.
func OpenGrants(ctx context.Context, opts GrantOptions) (*Grants, error) {
	if opts.Store == nil || opts.Policy == nil {
		return nil, errors.New("confirm: GrantOptions.Store and Policy are required")
	}
	if opts.MaxSession <= 0 {
		opts.MaxSession = DefaultMaxSessionGrant
	}
	if opts.MaxPattern <= 0 {
		opts.MaxPattern = DefaultMaxPatternGrant
	}
	if opts.MinFor <= 0 {
		opts.MinFor = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := opts.Store.Migrate(ctx, grantsComponent, grantsMigrations); err != nil {
		return nil, fmt.Errorf("confirm: grants: %w", err)
	}
	return &Grants{opts: opts, store: grantStore{db: opts.Store}, log: opts.Logger}, nil
}

// List returns the grants q selects that who may see, newest first.
func (g *Grants) List(ctx context.Context, who Approver, q GrantQuery) ([]Grant, error) {
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	return g.store.list(ctx, q, who.Tenants)
}

// Get returns grant id if who may see it.
func (g *Grants) Get(ctx context.Context, who Approver, id string) (Grant, error) {
	gr, err := g.store.get(ctx, id)
	if err != nil {
		return Grant{}, err
	}
	if !who.Sees(gr.Tenant) {
		return Grant{}, ErrGrantNotFound
	}
	return gr, nil
}

// Revoke ends grant id now. Revoking twice is ErrGrantRevoked; an
// expired grant can still be revoked (the record says who ended it).
func (g *Grants) Revoke(ctx context.Context, who Approver, id, reason string) (Grant, error) {
	if who.Name == "" {
		return Grant{}, ErrNoIdentity
	}
	gr, err := g.Get(ctx, who, id)
	if err != nil {
		return Grant{}, err
	}
	now := time.Now()
	if err := g.store.revoke(ctx, id, who.Name, now); errors.Is(err, errNotPending) {
		return Grant{}, ErrGrantRevoked
	} else if err != nil {
		return Grant{}, fmt.Errorf("confirm: revoke grant: %w", err)
	}
	gr.RevokedBy, gr.RevokedAt = who.Name, now
	g.audit(ctx, AuditGrantRevoked, gr, who.Name, map[string]string{"reason": truncate(reason, 200)})
	return gr, nil
}

// sessionEnded is who revokes what a deleted or expired session held.
const sessionEnded = "system:session-ended"

// revokeFrom revokes the live grants of tenant's session that approval
// (or accepted proposal) id gave.
func (g *Grants) revokeFrom(ctx context.Context, tenant, sessionID, id, by string) error {
	return g.revokeWhere(ctx, tenant, sessionID, by, "its proposal was revoked", func(gr Grant) bool { return gr.ApprovalID == id })
}

// EndSession revokes the live grants scoped to a session that was deleted
// or expired, so a later session of the same name starts without them.
func (g *Grants) EndSession(ctx context.Context, tenant, sessionID string) error {
	return g.revokeWhere(ctx, tenant, sessionID, sessionEnded, "the session ended", func(gr Grant) bool {
		return gr.Scope == "session" && gr.SessionID == sessionID
	})
}

// revokeWhere revokes the live grants that cover tenant's session and
// that match.
func (g *Grants) revokeWhere(ctx context.Context, tenant, sessionID, by, reason string, match func(Grant) bool) error {
	live, err := g.store.list(ctx, GrantQuery{Tenant: tenant, SessionID: sessionID, Live: true, Now: time.Now()}, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, gr := range live {
		if match(gr) {
			errs = append(errs, g.revokeNow(ctx, gr, by, reason))
		}
	}
	return errors.Join(errs...)
}

func (g *Grants) revokeNow(ctx context.Context, gr Grant, by, reason string) error {
	if err := g.store.revoke(ctx, gr.ID, by, time.Now()); errors.Is(err, errNotPending) {
		return nil // revoked meanwhile
	} else if err != nil {
		return fmt.Errorf("confirm: revoke grant: %w", err)
	}
	g.audit(ctx, AuditGrantRevoked, gr, by, map[string]string{"reason": reason})
	return nil
}

// scope checks an approval's scope and for_s: "once" (or nothing), an
// egress "session" (with for_s and path_prefix on a held request, a
// grant: egressScope), or for a run, with grants enabled, "session" or
// "pattern" with a duration in bounds.
func (g *Grants) scope(v View, status string, d Decision) (string, error) {
	kind := v.Kind
	if kind == KindEgress && (d.ForS != 0 || d.PathPrefix != "") {
		return g.egressScope(v, status, d)
	}
	if d.PathPrefix != "" {
		return "", ErrGrantPrefix
	}
	if status != StatusApproved || kind != KindRun || (d.Scope != ScopeSession && d.Scope != ScopePattern) {
		if d.ForS != 0 {
			return "", ErrGrantDuration
		}
		return scopeFor(kind, status, d.Scope)
	}
	if g == nil {
		return "", ErrInvalidScope
	}
	limit := g.opts.MaxSession
	if d.Scope == ScopePattern {
		limit = g.opts.MaxPattern
	}
	if forS := time.Duration(d.ForS) * time.Second; forS < g.opts.MinFor || forS > limit {
		return "", ErrGrantDuration
	}
	return d.Scope, nil
}

// give records the grant an approval of v with scope for forS seconds
// gives.
func (g *Grants) give(ctx context.Context, v View, scope string, forS int, by string) (Grant, error) {
	now := time.Now()
	gr := Grant{ID: newGrantID(), Kind: KindRun, Scope: "session", Tenant: v.Tenant, SessionID: v.SessionID,
		Language: v.Language, Level: v.RiskLevel, Patterns: []string{}, ApprovalID: v.ID, CreatedBy: by,
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(forS) * time.Second)}
	if scope == ScopePattern {
		gr.Scope, gr.SessionID = "tenant", ""
	}
	for _, p := range v.Patterns {
		if !contains(gr.Patterns, p.ID) {
			gr.Patterns = append(gr.Patterns, p.ID)
		}
	}
	if err := g.store.insert(ctx, gr); err != nil {
		return Grant{}, fmt.Errorf("confirm: record grant: %w", err)
	}
	g.audit(ctx, AuditGrantCreated, gr, by, map[string]string{"approval_id": v.ID, "expires_at": fmtTime(gr.ExpiresAt),
		"scope": gr.Scope, "risk_level": gr.Level})
	g.log.InfoContext(ctx, "grant given", "grant_id", gr.ID, "tenant", gr.Tenant, "session_id", gr.SessionID,
		"scope", gr.Scope, "by", by, "expires_at", gr.ExpiresAt)
	return gr, nil
}

// cover asks the policy whether a live grant covers req. Any failure is
// "no": a person is asked, as without grants (never a silent allow).
func (g *Grants) cover(ctx context.Context, req Request) (Grant, bool) {
	if req.Kind != KindRun && req.Kind != KindEgress {
		return Grant{}, false
	}
	now := time.Now()
	live, err := g.liveOf(ctx, req.Kind, req.Tenant, req.SessionID, now)
	if err != nil {
		g.log.ErrorContext(ctx, "grants not read; asking a person", "err", err)
		return Grant{}, false
	}
	if len(live) == 0 {
		return Grant{}, false
	}
	var id string
	if req.Kind == KindEgress {
		id, err = g.coveringEgress(ctx, req, live)
	} else {
		id, err = g.opts.Policy.CoveringGrant(ctx, req, live)
	}
	if err != nil {
		g.log.ErrorContext(ctx, "grant policy failed; asking a person", "err", err)
		return Grant{}, false
	}
	for _, gr := range live {
		if gr.ID == id {
			if err := g.store.used(context.WithoutCancel(ctx), id, now); err != nil {
				g.log.ErrorContext(ctx, "grant use not counted", "grant_id", id, "err", err)
			}
			return gr, true
		}
	}
	if id != "" {
		g.log.ErrorContext(ctx, "the policy named a grant that is not live; asking a person", "grant_id", id)
	}
	return Grant{}, false
}

// liveOf are the live grants of kind that apply to tenant's session: the
// run policy never sees an egress grant, nor the egress policy a run's.
func (g *Grants) liveOf(ctx context.Context, kind, tenant, sessionID string, now time.Time) ([]Grant, error) {
	live, err := g.store.list(ctx, GrantQuery{Tenant: tenant, SessionID: sessionID, Live: true, Now: now}, nil)
	return slices.DeleteFunc(live, func(gr Grant) bool { return gr.Kind != kind }), err
}

func (g *Grants) audit(ctx context.Context, kind string, gr Grant, by string, detail map[string]string) {
	if g.opts.Audit == nil {
		return
	}
	detail["grant_id"] = gr.ID
	rec := &audit.Record{Kind: kind, Tenant: gr.Tenant, SessionID: gr.SessionID, Principal: by, Outcome: audit.OutcomeOK,
		Detail: detail}
	if err := g.opts.Audit.Append(context.WithoutCancel(ctx), rec); err != nil {
		g.log.ErrorContext(ctx, "grant audit record not written", "grant_id", gr.ID, "err", err)
	}
}

// grantOutcome is the answer a covering grant gives: approved, with the
// grant's id where an approval's would be.
func grantOutcome(gr Grant) Outcome {
	return Outcome{ApprovalID: gr.ID, Status: StatusApproved, Scope: ScopeGrant, DecidedBy: "grant:" + gr.ID,
		Reason:    fmt.Sprintf("covered by %s's grant until %s", gr.CreatedBy, gr.ExpiresAt.UTC().Format(time.RFC3339)),
		DecidedAt: time.Now()}
}

func newGrantID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "grt_" + hex.EncodeToString(b[:])
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// coverIfSet is cover on a hub with grants; nil grants cover nothing.
func (g *Grants) coverIfSet(ctx context.Context, req Request) (Grant, bool) {
	if g == nil {
		return Grant{}, false
	}
	return g.cover(ctx, req)
}

// withGrant records the grant a successful decision with a grant scope
// gives. The request itself is already approved; when the grant cannot
// be written the approver is told (the approval stands, once).
func (h *Hub) withGrant(ctx context.Context, fin View, err error, d Decision, by string) (View, error) {
	if err != nil || fin.Status != StatusApproved || fin.Kind != KindRun || (fin.Scope != ScopeSession && fin.Scope != ScopePattern) {
		return fin, err
	}
	gr, gerr := h.opts.Grants.give(context.WithoutCancel(ctx), fin, fin.Scope, d.ForS, by)
	if gerr != nil {
		h.log.ErrorContext(ctx, "grant not recorded; the approval was once", "approval_id", fin.ID, "err", gerr)
		return fin, gerr
	}
	fin.Grant = &gr
	return fin, nil
}

// Grants returns the hub's grants; nil when they are not enabled.
func (h *Hub) Grants() *Grants { return h.opts.Grants }

// NearGrant is a live grant of the request's session or tenant that did
// not cover it, and why, as the policy says.
type NearGrant struct {
	Grant Grant    `json:"grant"`
	Why   []string `json:"why"`
}

// NearMisses are the grants that almost matched v (a run approval): the
// live grants of its session and tenant, with why each did not cover it.
func (g *Grants) NearMisses(ctx context.Context, v View) ([]NearGrant, error) {
	out := []NearGrant{}
	if g == nil || v.Kind == KindEgress {
		return out, nil
	}
	live, err := g.liveOf(ctx, KindRun, v.Tenant, v.SessionID, time.Now())
	if err != nil || len(live) == 0 {
		return out, err
	}
	req := Request{Tenant: v.Tenant, SessionID: v.SessionID, Language: v.Language, CodeSHA256: v.CodeSHA256,
		RiskLevel: v.RiskLevel, Patterns: v.Patterns, Context: v.Context, Principal: v.Principal}
	why, err := g.opts.Policy.GrantMisses(ctx, req, live)
	if err != nil {
		return out, err
	}
	for _, gr := range live {
		if len(why[gr.ID]) > 0 {
			out = append(out, NearGrant{Grant: gr, Why: why[gr.ID]})
		}
	}
	return out, nil
}
