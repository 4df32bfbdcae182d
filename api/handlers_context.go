package api

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/workspace"
)

// approvalContextBody is GET /v1/approvals/{id}/context: what an approver
// needs beside the request itself (issue 31, "context for the decision"):
// the session's recent timeline from the audit log (runs with their
// outcome, file changes, egress connections) and the grants that almost
// matched, with why each did not, as the policy says.
//
// The audit log keeps no output and no file contents (it never keeps
// what a run printed or wrote): the items are its records (outcomes, exit
// codes, paths and sizes), each joined by request id with what the hub's
// activity ring still holds of it: a run's redacted output excerpt, a
// written or edited file's bounded diff (confirm.Activity says why they
// live there). In a fleet, the replica serving the session answers, as
// it holds the ring.
type approvalContextBody struct {
	Timeline   []timelineItem      `json:"timeline"`
	NearGrants []confirm.NearGrant `json:"near_grants"`
}

type timelineItem struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Outcome   string    `json:"outcome"`
	Action    string    `json:"action,omitempty"`
	RiskLevel string    `json:"risk_level,omitempty"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	ErrorCode string    `json:"error_code,omitempty"`
	// What is the item's object: a run's language and code size, a
	// file's path and bytes, a connection's host:port.
	What       string `json:"what"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	// Output is a run's output excerpt, Diff a file write's or edit's
	// diff, while the session's activity ring holds them.
	Output *confirm.RunOutput `json:"output,omitempty"`
	Diff   *confirm.FileDiff  `json:"diff,omitempty"`
}

// maxTimeline is how many of the session's latest records are shown.
const maxTimeline = 20

func (s *Server) approvalContext(w http.ResponseWriter, r *http.Request) error {
	hub := s.deps.Approvals
	if hub == nil {
		return errApprovalsOff
	}
	v, err := hub.GetFor(r.Context(), r.PathValue("id"), approver(r))
	if err != nil {
		return err
	}
	// Only a request pending on another replica is asked there: routing
	// claims the session's ownership when nobody holds it, which a read
	// must not do for a session nothing waits in.
	if s.deps.Fleet != nil && v.Status == confirm.StatusPending && !hub.HeldHere(v.ID) {
		ctx := r.Context()
		if handled, err := s.deps.Fleet.Route(w, r, workspace.Key(v.Tenant, v.SessionID), requestID(ctx), forwarded(ctx)); err != nil || handled {
			return err
		}
	}
	out := approvalContextBody{Timeline: []timelineItem{}}
	page, err := s.deps.Audit.Query(r.Context(), audit.Query{Tenant: v.Tenant, SessionID: v.SessionID, Limit: 100})
	if err != nil {
		return err
	}
	activity := hub.Activity().Session(v.Tenant, v.SessionID)
	for _, rec := range page.Records {
		if it, ok := timelineOf(rec); ok && len(out.Timeline) < maxTimeline {
			if a, ok := activity[rec.RequestID]; ok && rec.RequestID != "" {
				if it.Kind == "run_code" || it.Kind == "execute" {
					it.Output = a.Output
				} else if it.Kind == "file.write" || it.Kind == "file.edit" {
					it.Diff = a.Diff
				}
			}
			out.Timeline = append(out.Timeline, it)
		}
	}
	if out.NearGrants, err = hub.Grants().NearMisses(r.Context(), v); err != nil {
		s.log.ErrorContext(r.Context(), "grants that almost matched", "approval_id", v.ID, "err", err)
		out.NearGrants = []confirm.NearGrant{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// timelineOf is a record as a timeline item; approvals' own records and
// other bookkeeping are left out.
func timelineOf(rec audit.Record) (timelineItem, bool) {
	it := timelineItem{Time: rec.Time, Kind: rec.Kind, Outcome: rec.Outcome, Action: rec.Action, RiskLevel: rec.RiskLevel,
		ExitCode: rec.ExitCode, ErrorCode: rec.ErrorCode, DurationMS: rec.DurationMS}
	switch {
	case rec.Kind == "run_code" || rec.Kind == "execute":
		it.What = rec.Language + ", " + strconv.Itoa(rec.CodeBytes) + " bytes"
	case rec.Kind == "egress":
		it.What = rec.Detail["host"] + ":" + rec.Detail["port"]
	case strings.HasPrefix(rec.Kind, "file."):
		it.What = rec.Path
		if rec.Bytes > 0 {
			it.What += " (" + strconv.FormatInt(rec.Bytes, 10) + " bytes)"
		}
	default:
		return it, false
	}
	return it, true
}
