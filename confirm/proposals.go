package confirm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/policy/replay"
)

// Proposals: an agent that was denied asks for a narrow exception, and a
// person decides with its effect in front of them. The gateway builds the
// policy data the proposal would add (an egress rule scoped to the
// session), replays the tenant's recent audit window against it, and
// keeps the decisions that would change. Accepted, the data becomes an
// overlay on the policy's own (policy.Engine.SetEgressOverlay) with an
// owner and an expiry; rejected, the agent reads why.

// Proposal kinds.
const (
	ProposalEgressHost = "egress_host"
	ProposalPattern    = "pattern"
	ProposalExecutor   = "executor"
)

// Proposal statuses.
const (
	ProposalPending  = "pending"
	ProposalAccepted = "accepted"
	ProposalRejected = "rejected"
	ProposalRevoked  = "revoked"
)

// Defaults of proposals.
const (
	DefaultProposalFor      = 24 * time.Hour
	MaxProposalFor          = 7 * 24 * time.Hour
	DefaultReplayWindow     = 24 * time.Hour
	DefaultReplayLimit      = 10000
	DefaultReplayBudget     = 2 * time.Second
	MaxJustificationBytes   = 2000
	maxProposalChangesShown = 200
	maxPendingPerSession    = 5
	// AuditProposal* are the audit kinds of a proposal's life.
	AuditProposalCreated  = "proposal.created"
	AuditProposalAccepted = "proposal.accepted"
	AuditProposalRejected = "proposal.rejected"
	AuditProposalRevoked  = "proposal.revoked"
	// AuditProposalWithdrawn: a proposal still pending when its session
	// ended, closed by the gateway (stored as rejected by
	// system:session-ended, so the store's statuses and the channels'
	// messages need nothing new).
	AuditProposalWithdrawn = "proposal.withdrawn"
)

var (
	ErrProposalNotFound = errcode.New(errcode.NotFound, "no such proposal")
	ErrProposalDecided  = errcode.New(errcode.Conflict, "the proposal was already decided")
	ErrProposalKind     = errcode.New(errcode.InvalidRequest, `kind must be "egress_host", "pattern" or "executor"`)
	ErrProposalValue    = errcode.New(errcode.InvalidRequest, "value is not a host name (egress_host: host or host:port), a risk pattern id (pattern) or an executor name (executor)")
	ErrProposalJustify  = errcode.New(errcode.InvalidRequest, "justification is required, at most 2000 bytes")
	ErrProposalDecision = errcode.New(errcode.InvalidRequest, `decision must be "accept" or "reject"`)
	ErrProposalFor      = errcode.New(errcode.InvalidRequest, "for_s must be between 60 and 604800")
	// ErrProposalsPending bounds what one session can ask: each proposal
	// costs a replay and a person's attention.
	ErrProposalsPending = errcode.New(errcode.Conflict, "the session already has 5 pending proposals; wait for their answers")
	// ErrProposalSessionEnded is a decision on a proposal whose session
	// ended: it was withdrawn then, and nothing it asked for can apply.
	ErrProposalSessionEnded = errcode.New(errcode.Conflict, "the proposal's session has ended; the proposal was withdrawn")
)

// Proposal is one request for an exception.
type Proposal struct {
	ID            string `json:"id"`
	Tenant        string `json:"tenant"`
	SessionID     string `json:"session_id"`
	Kind          string `json:"kind"`
	Value         string `json:"value"`
	Justification string `json:"justification"`
	// Principal is the agent that proposed it.
	Principal string    `json:"principal"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	DecidedBy string    `json:"decided_by,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Reason is the approver's word, which the agent reads.
	Reason    string    `json:"reason,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Overlay is the policy data the proposal adds: an egress rule
	// (egress_host), a grant (pattern) or the session's executor
	// (executor: {session, executor}).
	Overlay map[string]any `json:"overlay"`
	Effect  Effect         `json:"effect"`
}

// Effect is the replay of the tenant's recent window against the
// candidate: how many decisions were replayed and those that would change.
type Effect struct {
	Since    time.Time `json:"since"`
	Replayed int       `json:"replayed"`
	// Changed lists the decisions that would change, newest first (at
	// most 200; ChangedCount counts them all).
	Changed      []Change `json:"changed"`
	ChangedCount int      `json:"changed_count"`
	// Distinct is how many distinct inputs the records made (each is
	// decided once); Drifted counts records the candidate decides
	// otherwise than recorded but as the policy decides them now (the
	// policy moved since, not the proposal's doing).
	Distinct int   `json:"distinct"`
	Drifted  int   `json:"drifted"`
	ReplayMS int64 `json:"replay_ms"`
	// Truncated: the replay stopped at its budget; Replayed counts the
	// records it decided (the newest first; a record the candidate decides
	// otherwise is counted once the policy as it is now has decided it too).
	Truncated bool `json:"truncated,omitempty"`
}

// Change is one recorded decision the candidate would decide otherwise.
type Change struct {
	RecordID  int64     `json:"record_id"`
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	SessionID string    `json:"session_id"`
	// What is the connection's host:port, or the run's risk and patterns.
	What      string `json:"what"`
	Recorded  string `json:"recorded"`
	Now       string `json:"now"`
	Candidate string `json:"candidate"`
	Rule      string `json:"rule,omitempty"`
}

// ProposalOptions configure OpenProposals.
type ProposalOptions struct {
	Store  Store
	Audit  audit.Store
	Policy *policy.Engine
	// Mode is the gateway's security mode (the replay's input).
	Mode   string
	Logger *slog.Logger
	// Grants receives the grant an accepted pattern proposal becomes;
	// nil refuses pattern proposals.
	Grants *Grants
	// Window and Limit bound the replay: the tenant's records of the
	// last Window, at most Limit. Defaults DefaultReplayWindow and
	// DefaultReplayLimit.
	Window time.Duration
	Limit  int
	// Refresh is how often the overlay is re-read from the database (a
	// peer's decisions, expiries, policy reloads). Default 1 s.
	Refresh time.Duration
	// Executors are the executors configured, with their state (the
	// policy input's executors); an executor proposal must name one of
	// them. Nil refuses executor proposals.
	Executors func(ctx context.Context) map[string]policy.ExecutorState
	// Budget bounds a proposal's replay (the agent's POST waits for it);
	// past it the effect is partial and says so. Default
	// DefaultReplayBudget.
	Budget time.Duration
}

// Proposals is the book of proposals and the overlay they make.
type Proposals struct {
	opts  ProposalOptions
	store proposalStore
	log   *slog.Logger

	mu        sync.Mutex // serialises overlay writes
	applied   string     // the live overlay's ids and the engine's reload count
	onOverlay func(context.Context)
	delivery  proposalDelivery // to the approval channels (proposals_channels.go)
	stop      chan struct{}
	done      chan struct{}
	close     sync.Once
}

// OpenProposals creates or migrates the proposals table, puts the live
// overlay in force and keeps it so until Close.
func OpenProposals(ctx context.Context, opts ProposalOptions) (*Proposals, error) {
	if opts.Store == nil || opts.Policy == nil {
		return nil, errors.New("confirm: ProposalOptions.Store and Policy are required")
	}
	if opts.Window <= 0 {
		opts.Window = DefaultReplayWindow
	}
	if opts.Limit <= 0 {
		opts.Limit = DefaultReplayLimit
	}
	if opts.Refresh <= 0 {
		opts.Refresh = time.Second
	}
	if opts.Budget <= 0 {
		opts.Budget = DefaultReplayBudget
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := opts.Store.Migrate(ctx, proposalsComponent, proposalsMigrations); err != nil {
		return nil, fmt.Errorf("confirm: proposals: %w", err)
	}
	p := &Proposals{opts: opts, store: proposalStore{db: opts.Store}, log: opts.Logger,
		stop: make(chan struct{}), done: make(chan struct{})}
	p.delivery.init()
	p.delivery.retryMin, p.delivery.retryMax = DefaultChannelRetryMin, DefaultChannelRetryMax
	if err := p.apply(ctx, true); err != nil {
		return nil, err
	}
	go p.refresh()
	return p, nil
}

// Close stops keeping the overlay (it stays in the engine as it is).
func (p *Proposals) Close() {
	p.close.Do(func() { close(p.stop) })
	<-p.done
	p.delivery.closeDelivery()
}

func (p *Proposals) refresh() {
	defer close(p.done)
	t := time.NewTicker(p.opts.Refresh)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := p.apply(ctx, false); err != nil {
				p.log.Error("proposal overlay not refreshed", "err", err)
			}
			p.syncAllPosted(ctx)
			cancel()
		}
	}
}

// apply puts the accepted, unexpired egress proposals in force when they
// or the policy revision changed since the last time (or always, force).
func (p *Proposals) apply(ctx context.Context, force bool) error {
	live, err := p.store.list(ctx, ProposalQuery{Status: ProposalAccepted, LiveAt: time.Now()}, nil)
	if err != nil {
		return err
	}
	var rules []map[string]any
	key := strconv.FormatUint(p.opts.Policy.Status().Reloads, 10)
	for _, pr := range live {
		if pr.Kind == ProposalEgressHost || pr.Kind == ProposalExecutor {
			key += "," + pr.ID
		}
		if pr.Kind == ProposalEgressHost {
			rules = append(rules, pr.Overlay)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !force && key == p.applied {
		return nil
	}
	if err := p.opts.Policy.SetEgressOverlay(ctx, rules); err != nil && !errors.Is(err, policy.ErrNoEgressData) {
		return err
	}
	if err := p.opts.Policy.SetExecutorOverlay(ctx, executorOverlays(live)); err != nil {
		return err
	}
	changed := p.applied != "" && key != p.applied
	p.applied = key
	if changed && p.onOverlay != nil {
		p.onOverlay(ctx)
	}
	return nil
}

// OnOverlay sets f to be called after the overlay in force changed (a
// proposal accepted, revoked, ended with its session, or expired), so
// that the egress proxy closes the tunnels it no longer allows.
func (p *Proposals) OnOverlay(f func(context.Context)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onOverlay = f
}

// ProposalRequest is what an agent sends.
type ProposalRequest struct {
	Tenant, SessionID, Principal string
	Kind, Value, Justification   string
}

var hostRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
var patternRE = regexp.MustCompile(`^[a-z0-9_.]{1,100}$`)

// Propose records a proposal with its effect. The replay runs before the
// answer (a second at most over DefaultReplayLimit records), so the
// approver sees the effect as soon as the proposal is listed.
func (p *Proposals) Propose(ctx context.Context, req ProposalRequest) (Proposal, error) {
	pr := Proposal{ID: newProposalID(), Tenant: req.Tenant, SessionID: req.SessionID, Principal: req.Principal,
		Kind: req.Kind, Value: strings.TrimSpace(strings.ToLower(req.Value)), Justification: strings.TrimSpace(req.Justification),
		Status: ProposalPending, CreatedAt: time.Now()}
	if pr.Justification == "" || len(pr.Justification) > MaxJustificationBytes {
		return Proposal{}, ErrProposalJustify
	}
	pending, err := p.store.list(ctx, ProposalQuery{Status: ProposalPending, Tenant: pr.Tenant, SessionID: pr.SessionID,
		Limit: maxPendingPerSession}, nil)
	if err != nil {
		return Proposal{}, err
	}
	if len(pending) >= maxPendingPerSession {
		return Proposal{}, ErrProposalsPending
	}
	switch pr.Kind {
	case ProposalEgressHost:
		pr.Overlay, err = egressOverlay(pr)
		if err == nil {
			pr.Effect, err = p.egressEffect(ctx, pr)
		}
	case ProposalPattern:
		if p.opts.Grants == nil {
			return Proposal{}, ErrProposalKind
		}
		if !patternRE.MatchString(pr.Value) {
			return Proposal{}, ErrProposalValue
		}
		pr.Overlay = map[string]any{"grant": map[string]any{"scope": "session", "tenant": pr.Tenant, "session_id": pr.SessionID,
			"language": "*", "level": "HIGH", "patterns": []string{pr.Value}}}
		pr.Effect, err = p.patternEffect(ctx, pr)
	case ProposalExecutor:
		pr.Overlay, err = p.executorOverlay(ctx, pr)
		if err == nil {
			pr.Effect, err = p.executorEffect(ctx, pr)
		}
	default:
		return Proposal{}, ErrProposalKind
	}
	if err != nil {
		return Proposal{}, err
	}
	if err := p.store.insert(ctx, pr); err != nil {
		return Proposal{}, fmt.Errorf("confirm: record proposal: %w", err)
	}
	p.audit(ctx, AuditProposalCreated, pr, req.Principal, map[string]string{"kind": pr.Kind, "value": pr.Value,
		"changed": strconv.Itoa(pr.Effect.ChangedCount), "replayed": strconv.Itoa(pr.Effect.Replayed)})
	p.log.InfoContext(ctx, "proposal made", "proposal_id", pr.ID, "tenant", pr.Tenant, "session_id", pr.SessionID,
		"kind", pr.Kind, "value", pr.Value, "changed", pr.Effect.ChangedCount)
	p.notifyProposal(pr)
	return pr, nil
}

// egressOverlay is the rule an egress_host proposal adds: allow the host
// (one port when named, else the policy's ports) to the session only.
func egressOverlay(pr Proposal) (map[string]any, error) {
	host, port := pr.Value, 0
	if h, ps, ok := strings.Cut(pr.Value, ":"); ok {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return nil, ErrProposalValue
		}
		host, port = h, n
	}
	host = strings.TrimSuffix(host, ".")
	if len(host) > 253 || !hostRE.MatchString(host) {
		return nil, ErrProposalValue
	}
	// connection_only: the rule lets the session's connections to the
	// host through, and on a host with HTTP rules its requests stay
	// decided by those (the replay shows the approver connections only).
	rule := map[string]any{"name": "proposal:" + pr.ID, "action": "allow", "hosts": []any{host},
		"sessions": []any{pr.Tenant + "/" + pr.SessionID}, "connection_only": true}
	if port != 0 {
		rule["ports"] = []any{port}
	}
	return rule, nil
}

// egressEffect replays the tenant's recent egress records against the
// policy with the rule added.
func (p *Proposals) egressEffect(ctx context.Context, pr Proposal) (Effect, error) {
	start := time.Now()
	since := start.Add(-p.opts.Window)
	recs, err := replay.Window(ctx, p.opts.Audit, audit.Query{Tenant: pr.Tenant, Kind: replay.KindEgress, Since: since},
		p.opts.Limit, replay.IsEgress)
	if err != nil {
		return Effect{}, err
	}
	return p.replayEgress(ctx, pr.Overlay, recs, since, start)
}

// replayEgress is the replay of recs against rule, as `sandgate policy
// diff` replays a window: each distinct connection target is decided
// once with the candidate, and compared with what its records say was
// decided; where they differ, the policy as it is now decides it too, and
// the record is a change of the proposal's when now and the candidate
// differ (otherwise the policy moved since the record, and the record is
// counted in Drifted). A record the candidate decides as it was recorded
// is no change. Both sides are decided on every core (policy.EgressReplay)
// within the budget.
func (p *Proposals) replayEgress(ctx context.Context, rule map[string]any, recs []audit.Record, since, start time.Time) (Effect, error) {
	ins, which := distinctEgress(recs, p.opts.Mode)
	r, err := p.opts.Policy.NewEgressReplay(ctx, []map[string]any{rule})
	if err != nil {
		return Effect{}, err
	}
	cand, err := p.budgeted(ctx, ins, start, r.Candidate)
	if err != nil {
		return Effect{}, err
	}
	// The policy as it is now decides the targets the candidate decides
	// otherwise than one of their records.
	var need []int
	needed := make([]bool, len(cand))
	for i, rec := range recs {
		if j := which[i]; j < len(cand) && cand[j].Action != rec.Action && !needed[j] {
			needed[j] = true
			need = append(need, j)
		}
	}
	needIns := make([]policy.EgressInput, len(need))
	for k, j := range need {
		needIns[k] = ins[j]
	}
	nowD, err := p.budgeted(ctx, needIns, start, r.Now)
	if err != nil {
		return Effect{}, err
	}
	now := make(map[int]policy.EgressDecision, len(nowD))
	for k, d := range nowD {
		now[need[k]] = d
	}
	eff := Effect{Since: since, Distinct: len(ins), Changed: []Change{}, Truncated: len(cand) < len(ins) || len(nowD) < len(need)}
	for i, rec := range recs {
		j := which[i]
		if j >= len(cand) {
			continue // past the budget
		}
		c := cand[j]
		if c.Action == rec.Action {
			eff.Replayed++
			continue
		}
		n, ok := now[j]
		if !ok {
			continue // past the budget
		}
		eff.Replayed++
		if n.Action == c.Action {
			eff.Drifted++
			continue
		}
		eff.ChangedCount++
		if len(eff.Changed) < maxProposalChangesShown {
			eff.Changed = append(eff.Changed, Change{RecordID: rec.ID, Time: rec.Time, Kind: rec.Kind, SessionID: rec.SessionID,
				What: rec.Detail["host"] + ":" + rec.Detail["port"], Recorded: rec.Action, Now: n.Action, Candidate: c.Action, Rule: c.Rule})
		}
	}
	eff.ReplayMS = time.Since(start).Milliseconds()
	return eff, nil
}

// distinctEgress is the distinct policy inputs of recs, in the order of
// their first record, and for each record the index of its input: a
// window repeats its targets, and each is decided once.
func distinctEgress(recs []audit.Record, mode string) ([]policy.EgressInput, []int) {
	type key struct {
		host, scheme, session, tenant, addr, risk string
		port                                      int
	}
	index := map[key]int{}
	var ins []policy.EgressInput
	which := make([]int, len(recs))
	for i, rec := range recs {
		in := replay.EgressInput(rec, mode)
		k := key{in.Host, in.Scheme, in.SessionID, in.Tenant, strings.Join(in.Resolved, ","), in.Risk, in.Port}
		j, ok := index[k]
		if !ok {
			j = len(ins)
			index[k] = j
			ins = append(ins, in)
		}
		which[i] = j
	}
	return ins, which
}

// replayBatch is how many distinct inputs are decided between looks at
// the replay's budget.
const replayBatch = 250

// budgeted decides ins with decide in batches until the budget
// (ProposalOptions.Budget from start) is spent: the agent's POST answers
// in bounded time whatever the window holds, and the effect says when it
// is partial (newest records first, so the most recent are in). The first
// batch is always decided.
func (p *Proposals) budgeted(ctx context.Context, ins []policy.EgressInput, start time.Time,
	decide func(context.Context, []policy.EgressInput) ([]policy.EgressDecision, error)) ([]policy.EgressDecision, error) {
	out := make([]policy.EgressDecision, 0, len(ins))
	for lo := 0; lo < len(ins); lo += replayBatch {
		if lo > 0 && time.Since(start) > p.opts.Budget {
			break
		}
		hi := min(lo+replayBatch, len(ins))
		ds, err := decide(ctx, ins[lo:hi])
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// patternEffect replays the tenant's recent runs held for approval: those
// the candidate grant would have spared a prompt.
func (p *Proposals) patternEffect(ctx context.Context, pr Proposal) (Effect, error) {
	start := time.Now()
	since := start.Add(-p.opts.Window)
	recs, err := replay.Window(ctx, p.opts.Audit, audit.Query{Tenant: pr.Tenant, Since: since}, p.opts.Limit, replay.IsExec)
	if err != nil {
		return Effect{}, err
	}
	g := policy.Grant{ID: "candidate", Scope: "session", Tenant: pr.Tenant, SessionID: pr.SessionID, Language: "*", Level: "HIGH",
		Patterns: []string{pr.Value}, ExpiresAt: start.Add(DefaultProposalFor)}
	eff := Effect{Since: since, Replayed: len(recs), Changed: []Change{}}
	for _, rec := range recs {
		if rec.Approval == nil && rec.Action != policy.ActionRequireApproval {
			continue
		}
		id, err := p.opts.Policy.CoveringGrant(ctx, replay.ExecInput(rec, p.opts.Mode, 1), []policy.Grant{g})
		if err != nil || id == "" {
			continue
		}
		eff.ChangedCount++
		if len(eff.Changed) < maxProposalChangesShown {
			eff.Changed = append(eff.Changed, Change{RecordID: rec.ID, Time: rec.Time, Kind: rec.Kind, SessionID: rec.SessionID,
				What: rec.RiskLevel + " " + strings.Join(rec.RiskPatterns, ","), Recorded: rec.Action,
				Now: policy.ActionRequireApproval, Candidate: "allow (grant)"})
		}
	}
	eff.ReplayMS = time.Since(start).Milliseconds()
	return eff, nil
}

// List returns the proposals q selects that who may see, newest first.
func (p *Proposals) List(ctx context.Context, who Approver, q ProposalQuery) ([]Proposal, error) {
	return p.store.list(ctx, q, who.Tenants)
}

// Get returns proposal id if who may see it.
func (p *Proposals) Get(ctx context.Context, who Approver, id string) (Proposal, error) {
	pr, err := p.store.get(ctx, id)
	if err != nil {
		return Proposal{}, err
	}
	if !who.Sees(pr.Tenant) {
		return Proposal{}, ErrProposalNotFound
	}
	return pr, nil
}

// ProposalDecision is an approver's answer.
type ProposalDecision struct {
	Decision string `json:"decision"` // accept | reject
	Reason   string `json:"reason"`
	// ForS is how long an accepted proposal lasts; default 24 h, at most
	// 7 days.
	ForS int `json:"for_s,omitempty"`
}

// Decide accepts or rejects proposal id; the first decision wins. An
// accepted egress proposal is in force on this replica when Decide
// returns (and on the others within the refresh period).
func (p *Proposals) Decide(ctx context.Context, who Approver, id string, d ProposalDecision) (Proposal, error) {
	if who.Name == "" {
		return Proposal{}, ErrNoIdentity
	}
	if len(d.Reason) > MaxReasonBytes {
		return Proposal{}, ErrReasonTooLong
	}
	pr, err := p.Get(ctx, who, id)
	if err != nil {
		return Proposal{}, err
	}
	if withdrawn(pr) {
		return Proposal{}, ErrProposalSessionEnded
	}
	now := time.Now()
	pr.DecidedBy, pr.DecidedAt, pr.Reason = who.Name, now, d.Reason
	switch d.Decision {
	case "accept":
		forS := DefaultProposalFor
		if d.ForS != 0 {
			forS = time.Duration(d.ForS) * time.Second
		}
		if forS < time.Minute || forS > MaxProposalFor {
			return Proposal{}, ErrProposalFor
		}
		// A pattern proposal becomes a session grant, bounded as every
		// session grant is.
		if pr.Kind == ProposalPattern && p.opts.Grants != nil {
			forS = min(forS, p.opts.Grants.opts.MaxSession)
		}
		pr.Status, pr.ExpiresAt = ProposalAccepted, now.Add(forS)
	case "reject":
		pr.Status = ProposalRejected
	default:
		return Proposal{}, ErrProposalDecision
	}
	if err := p.store.decide(ctx, pr, ProposalPending); errors.Is(err, errNotPending) {
		if cur, err := p.store.get(ctx, id); err == nil && withdrawn(cur) {
			return Proposal{}, ErrProposalSessionEnded // withdrawn meanwhile
		}
		return Proposal{}, ErrProposalDecided
	} else if err != nil {
		return Proposal{}, fmt.Errorf("confirm: record proposal decision: %w", err)
	}
	if pr.Status == ProposalAccepted {
		if err := p.enact(ctx, pr, d, who); err != nil {
			return Proposal{}, err
		}
	}
	kind := AuditProposalRejected
	if pr.Status == ProposalAccepted {
		kind = AuditProposalAccepted
	}
	p.audit(ctx, kind, pr, who.Name, map[string]string{"kind": pr.Kind, "value": pr.Value, "reason": truncate(pr.Reason, 200),
		"expires_at": fmtIfSet(pr.ExpiresAt)})
	p.syncPosted(context.WithoutCancel(ctx), pr.ID)
	return pr, nil
}

// enact puts an accepted proposal in force: the overlay now, or the grant.
func (p *Proposals) enact(ctx context.Context, pr Proposal, d ProposalDecision, who Approver) error {
	if pr.Kind == ProposalPattern {
		v := View{ID: pr.ID, Tenant: pr.Tenant, SessionID: pr.SessionID, Language: "*", RiskLevel: "HIGH",
			Patterns: []Pattern{{ID: pr.Value}}}
		_, err := p.opts.Grants.give(ctx, v, ScopeSession, int(pr.ExpiresAt.Sub(pr.DecidedAt)/time.Second), who.Name)
		return err
	}
	return p.apply(ctx, true)
}

// Revoke ends an accepted proposal now.
func (p *Proposals) Revoke(ctx context.Context, who Approver, id, reason string) (Proposal, error) {
	pr, err := p.Get(ctx, who, id)
	if err != nil {
		return Proposal{}, err
	}
	pr, err = p.revoke(ctx, pr, who.Name, reason)
	if errors.Is(err, errNotPending) {
		return Proposal{}, ErrProposalDecided
	}
	return pr, err
}

// revoke ends accepted proposal pr now: recorded as revoked by by (the
// first to revoke wins: errNotPending after), taken out of force, audited.
func (p *Proposals) revoke(ctx context.Context, pr Proposal, by, reason string) (Proposal, error) {
	pr.Status, pr.DecidedBy, pr.DecidedAt, pr.Reason = ProposalRevoked, by, time.Now(), reason
	if err := p.store.decide(ctx, pr, ProposalAccepted); err != nil {
		return Proposal{}, err
	}
	if err := p.end(ctx, pr, by); err != nil {
		return Proposal{}, err
	}
	p.audit(ctx, AuditProposalRevoked, pr, by, map[string]string{"reason": truncate(reason, 200)})
	p.syncPosted(context.WithoutCancel(ctx), pr.ID)
	return pr, nil
}

// end takes a revoked proposal out of force: its egress rule from the
// overlay, or the grant an accepted pattern proposal became.
func (p *Proposals) end(ctx context.Context, pr Proposal, by string) error {
	if pr.Kind == ProposalPattern && p.opts.Grants != nil {
		return p.opts.Grants.revokeFrom(ctx, pr.Tenant, pr.SessionID, pr.ID, by)
	}
	return p.apply(ctx, true)
}

// EndSession closes the proposals of a session that was deleted or
// expired: the pending ones are withdrawn (an approver's Accept button,
// in Slack or elsewhere, could otherwise put a proposal in force for a
// later session of the same name; audited as proposal.withdrawn, posted
// messages updated), then the accepted ones are revoked (audited as
// proposal.revoked). Both by "system:session-ended". Pending ones go
// first: one accepted meanwhile is then in the accepted list.
func (p *Proposals) EndSession(ctx context.Context, tenant, sessionID string) error {
	pending, err := p.store.list(ctx, ProposalQuery{Status: ProposalPending, Tenant: tenant, SessionID: sessionID}, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, pr := range pending {
		if err := p.withdraw(ctx, pr); err != nil && !errors.Is(err, errNotPending) {
			errs = append(errs, err) // errNotPending: decided meanwhile
		}
	}
	accepted, err := p.store.list(ctx, ProposalQuery{Status: ProposalAccepted, Tenant: tenant, SessionID: sessionID}, nil)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, pr := range accepted {
		if _, err := p.revoke(ctx, pr, sessionEnded, "the session ended"); err != nil && !errors.Is(err, errNotPending) {
			errs = append(errs, err) // errNotPending: revoked meanwhile
		}
	}
	return errors.Join(errs...)
}

// withdraw closes pending proposal pr because its session ended.
func (p *Proposals) withdraw(ctx context.Context, pr Proposal) error {
	pr.Status, pr.DecidedBy, pr.DecidedAt, pr.Reason = ProposalRejected, sessionEnded, time.Now(), "the session ended"
	if err := p.store.decide(ctx, pr, ProposalPending); err != nil {
		return err
	}
	p.audit(ctx, AuditProposalWithdrawn, pr, sessionEnded, map[string]string{"kind": pr.Kind, "value": pr.Value,
		"reason": pr.Reason})
	p.syncPosted(context.WithoutCancel(ctx), pr.ID)
	return nil
}

// withdrawn: pr was closed, undecided, when its session ended.
func withdrawn(pr Proposal) bool {
	return pr.Status == ProposalRejected && pr.DecidedBy == sessionEnded
}

func (p *Proposals) audit(ctx context.Context, kind string, pr Proposal, by string, detail map[string]string) {
	if p.opts.Audit == nil {
		return
	}
	detail["proposal_id"] = pr.ID
	rec := &audit.Record{Kind: kind, Tenant: pr.Tenant, SessionID: pr.SessionID, Principal: by, Outcome: audit.OutcomeOK, Detail: detail}
	if err := p.opts.Audit.Append(context.WithoutCancel(ctx), rec); err != nil {
		p.log.ErrorContext(ctx, "proposal audit record not written", "proposal_id", pr.ID, "err", err)
	}
}

func fmtIfSet(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return fmtTime(t)
}

func newProposalID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "prp_" + hex.EncodeToString(b[:])
}

// Proposals returns the hub's proposals; nil when they are not enabled.
func (h *Hub) Proposals() *Proposals { return h.opts.Proposals }
