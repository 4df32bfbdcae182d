package confirm

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/policy/replay"
)

// Executor proposals: an agent whose runs were denied because of the
// executor the policy routes them to (unavailable, or lacking a
// capability the run needs) asks that its session's runs use another
// executor tier. Accepted, the proposal is an entry of the policy's
// executor overlay (data.sandgate.overlay.executors, see
// policy.Engine.SetExecutorOverlay): the exec policy reads it below the AIO
// sandbox, a kernel's executor and the isolation upgrade, and still
// decides allow, approval or deny as before. The approver sees the
// session's recent runs whose executor or action would change.

// ErrProposalExecutor is an executor proposal naming an executor the
// gateway does not have.
var ErrProposalExecutor = errcode.New(errcode.InvalidRequest, "value is not an executor configured on this gateway")

// ErrProposalWeakens is an executor proposal that could move none of the
// session's runs to a more (or as) isolating executor than the one it
// gets now: the policy applies an overlay only where it keeps or raises
// isolation (config.executor_isolation) and never to CRITICAL runs, so
// such a proposal could only ever have asked to weaken isolation.
var ErrProposalWeakens = errcode.New(errcode.InvalidRequest,
	"the executor isolates no run more than the one it gets now; a proposal may only keep or raise isolation")

// replayTimeoutS is the timeout a replayed run is decided with (records do
// not keep the requested one): the policy's default.
const replayTimeoutS = 30

// executorOverlay is the overlay entry an executor proposal adds, after
// checking that the executor is configured.
func (p *Proposals) executorOverlay(ctx context.Context, pr Proposal) (map[string]any, error) {
	if p.opts.Executors == nil {
		return nil, ErrProposalKind
	}
	execs := p.opts.Executors(ctx)
	if _, ok := execs[pr.Value]; !ok || pr.Value == "" {
		return nil, ErrProposalExecutor
	}
	if err := p.checkRaisesIsolation(ctx, pr, execs); err != nil {
		return nil, err
	}
	return map[string]any{"session": sessionKey(pr.Tenant, pr.SessionID), "executor": pr.Value}, nil
}

// checkRaisesIsolation asks the policy itself (the ranking lives only in
// its data) whether the overlay would route any run of the session
// elsewhere: one plain, one detached and one session-sandbox run at each
// level below CRITICAL in the gateway's mode, decided with the candidate
// and as now. Moving none, the proposal could only weaken isolation.
func (p *Proposals) checkRaisesIsolation(ctx context.Context, pr Proposal, execs map[string]policy.ExecutorState) error {
	var ins []policy.Input
	for _, level := range []string{"SAFE", "LOW", "MEDIUM", "HIGH"} {
		for _, shape := range []policy.Request{{}, {Detached: true}, {SessionSandbox: true}} {
			req := shape
			req.Kind, req.SessionID, req.Language, req.TimeoutS = "run_code", pr.SessionID, "python", replayTimeoutS
			ins = append(ins, policy.Input{Mode: p.opts.Mode, Request: req, Executors: execs,
				Risk:      policy.Risk{Level: level, ProvenSafe: level == "SAFE"},
				Principal: policy.Principal{Role: "agent", Tenant: pr.Tenant}})
		}
	}
	cand, err := p.opts.Policy.ReplayExec(ctx, map[string]string{sessionKey(pr.Tenant, pr.SessionID): pr.Value}, ins)
	if err != nil {
		return err
	}
	for i, in := range ins {
		if cand[i].Executor != p.opts.Policy.DecideQuietly(ctx, in).Executor {
			return nil
		}
	}
	return ErrProposalWeakens
}

func sessionKey(tenant, sessionID string) string { return tenant + "/" + sessionID }

// executorOverlays is the executor overlay the live proposals make.
func executorOverlays(live []Proposal) map[string]string {
	out := map[string]string{}
	for _, pr := range live {
		if pr.Kind != ProposalExecutor {
			continue
		}
		s, _ := pr.Overlay["session"].(string)
		x, _ := pr.Overlay["executor"].(string)
		if _, seen := out[s]; s != "" && x != "" && !seen {
			out[s] = x // the list is newest first: the newest accepted wins
		}
	}
	return out
}

// executorEffect replays the tenant's recent runs against the candidate
// overlay. Only the session's own runs can change (the overlay is scoped
// to it); the others count as replayed, unchanged. Each distinct input
// is decided once with the candidate and once as now.
func (p *Proposals) executorEffect(ctx context.Context, pr Proposal) (Effect, error) {
	start := time.Now()
	since := start.Add(-p.opts.Window)
	recs, err := replay.Window(ctx, p.opts.Audit, audit.Query{Tenant: pr.Tenant, Since: since}, p.opts.Limit, replay.IsExec)
	if err != nil {
		return Effect{}, err
	}
	execs := p.opts.Executors(ctx)
	index := map[string]int{}
	var ins []policy.Input
	which := make([]int, len(recs))
	for i, rec := range recs {
		which[i] = -1
		if rec.SessionID != pr.SessionID {
			continue
		}
		in := replay.ExecInput(rec, p.opts.Mode, replayTimeoutS)
		in.Executors = execs
		k := strings.Join([]string{in.Request.Kind, in.Request.Language, in.Risk.Level, strings.Join(rec.RiskPatterns, ","),
			rec.Detail["stateful"], in.Principal.Role, in.Principal.Name}, "\x00")
		j, ok := index[k]
		if !ok {
			j = len(ins)
			index[k] = j
			ins = append(ins, in)
		}
		which[i] = j
	}
	cand, now, err := p.replayExecBudgeted(ctx, map[string]string{sessionKey(pr.Tenant, pr.SessionID): pr.Value}, ins, start)
	if err != nil {
		return Effect{}, err
	}
	eff := Effect{Since: since, Distinct: len(ins), Changed: []Change{}, Truncated: len(cand) < len(ins)}
	for i, rec := range recs {
		j := which[i]
		if j >= len(cand) {
			continue // past the budget
		}
		eff.Replayed++
		if j < 0 {
			continue // another session's: the overlay cannot change it
		}
		c, n := routeOf(cand[j]), routeOf(now[j])
		if c == n {
			if routeOf(policy.Decision{Action: rec.Action, Executor: rec.Executor}) != n && rec.Executor != "" {
				eff.Drifted++
			}
			continue
		}
		eff.ChangedCount++
		if len(eff.Changed) < maxProposalChangesShown {
			eff.Changed = append(eff.Changed, Change{RecordID: rec.ID, Time: rec.Time, Kind: rec.Kind, SessionID: rec.SessionID,
				What:     strings.TrimSpace(rec.RiskLevel + " " + strings.Join(slices.Compact(slices.Clone(rec.RiskPatterns)), ",")),
				Recorded: routeOf(policy.Decision{Action: rec.Action, Executor: rec.Executor}), Now: n, Candidate: c,
				Rule: firstCode(cand[j])})
		}
	}
	eff.ReplayMS = time.Since(start).Milliseconds()
	return eff, nil
}

// replayExecBudgeted decides ins with the candidate overlay and as now,
// in batches, until the budget (ProposalOptions.Budget from start) is
// spent, like the egress replay: the agent's POST answers in bounded time.
func (p *Proposals) replayExecBudgeted(ctx context.Context, overlay map[string]string, ins []policy.Input,
	start time.Time) (cand, now []policy.Decision, err error) {
	for lo := 0; lo < len(ins); lo += replayBatch {
		if lo > 0 && time.Since(start) > p.opts.Budget {
			break
		}
		hi := min(lo+replayBatch, len(ins))
		c, err := p.opts.Policy.ReplayExec(ctx, overlay, ins[lo:hi])
		if err != nil {
			return nil, nil, err
		}
		cand = append(cand, c...)
		for _, in := range ins[lo:hi] {
			now = append(now, p.opts.Policy.DecideQuietly(ctx, in))
		}
	}
	return cand, now, nil
}

// routeOf is a decision as the approver reads it: "allow on docker".
func routeOf(d policy.Decision) string {
	if d.Executor == "" || d.Executor == "none" {
		return d.Action
	}
	return d.Action + " on " + d.Executor
}

func firstCode(d policy.Decision) string {
	if len(d.Reasons) > 0 {
		return d.Reasons[0].Code
	}
	return ""
}
