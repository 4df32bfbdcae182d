// Package replay rebuilds policy inputs from audit records, so a candidate
// policy (or candidate data) can be judged by what it would have decided
// on what really happened: `sandgate policy diff` replays run records
// against a candidate policy, and a proposal (package confirm) replays a
// tenant's recent records against the data it would add.
package replay

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/policy"
)

// Kinds of the records replayed.
const (
	KindRunCode = "run_code"
	KindExecute = "execute"
	KindEgress  = "egress"
)

// IsExec keeps the run_code and execute records that carry a decision.
func IsExec(r audit.Record) bool {
	return (r.Kind == KindRunCode || r.Kind == KindExecute) && r.Action != "" && r.Outcome != audit.OutcomeStarted
}

// IsEgress keeps the egress connection records that carry a decision.
func IsEgress(r audit.Record) bool { return r.Kind == KindEgress && r.Action != "" }

// Window reads the records of q's window that keep accepts, newest first,
// up to limit, paging through the store.
func Window(ctx context.Context, db audit.Store, q audit.Query, limit int, keep func(audit.Record) bool) ([]audit.Record, error) {
	var out []audit.Record
	q.Limit = audit.DefaultMaxQueryLimit
	for len(out) < limit {
		page, err := db.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Records {
			if keep(r) {
				out = append(out, r)
				if len(out) == limit {
					break
				}
			}
		}
		if page.NextCursor == 0 {
			break
		}
		q.Before = page.NextCursor
	}
	return out, nil
}

// ExecInput is the policy input a run record allows reconstructing: mode
// (the caller's), request kind, session, language, code size and SHA-256,
// stateful (detail), risk level and pattern ids, principal role, name and
// tenant. The record does not keep the requested timeout (the caller's
// default is used), the context flags (false), the patterns' levels and
// lines, or the executors' state (the caller sets Executors).
func ExecInput(rec audit.Record, mode string, defaultTimeoutS int) policy.Input {
	role, name, _ := strings.Cut(rec.Principal, ":")
	in := policy.Input{
		Mode: mode,
		Request: policy.Request{Kind: rec.Kind, SessionID: rec.SessionID, Language: rec.Language, CodeBytes: rec.CodeBytes,
			CodeSHA256: rec.CodeSHA256, TimeoutS: defaultTimeoutS, Stateful: rec.Detail["stateful"] == "true"},
		// A record says SAFE only for a run that had the allowlist's
		// proof (the policy treats a SAFE without it as LOW).
		Risk:      policy.Risk{Level: rec.RiskLevel, ProvenSafe: rec.RiskLevel == "SAFE"},
		Principal: policy.Principal{Role: role, Name: name, Tenant: rec.Tenant},
	}
	for _, id := range slices.Compact(slices.Clone(rec.RiskPatterns)) {
		in.Risk.Patterns = append(in.Risk.Patterns, policy.RiskPattern{ID: id})
	}
	return in
}

// PublicStandIn is the address an egress record that kept none (a
// refused connection is never dialed) is replayed as resolving to: a
// public address, so the replay judges the host by the rules. A record
// refused for its address is replayed with a loopback address, and one
// whose host did not resolve with none, so both refusals reproduce.
const PublicStandIn = "198.51.100.7"

// EgressInput is the egress input an egress record allows reconstructing:
// host, port, scheme, session, tenant, principal, the run's risk, and the
// address dialed when it kept one (see PublicStandIn otherwise). The
// gateway's own addresses are not kept.
func EgressInput(rec audit.Record, mode string) policy.EgressInput {
	port, _ := strconv.Atoi(rec.Detail["port"])
	in := policy.EgressInput{Mode: mode, Host: rec.Detail["host"], Port: port, Scheme: rec.Detail["scheme"],
		SessionID: rec.SessionID, Tenant: rec.Tenant, Principal: rec.Principal, RequestID: rec.RequestID, Risk: rec.RiskLevel}
	switch {
	case rec.Detail["address"] != "":
		in.Resolved = []string{rec.Detail["address"]}
	case rec.Detail["rule"] == "egress.unresolved":
	case rec.Detail["rule"] == "egress.blocked_address":
		in.Resolved = []string{"127.0.0.1"}
	default:
		in.Resolved = []string{PublicStandIn}
	}
	return in
}
