package api

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
)

// approvalContextBody is GET /v1/approvals/{id}/context: what an approver
// needs beside the request itself (issue 31, "context for the decision"):
// the session's recent timeline from the audit log (runs with their
// outcome, file changes, egress connections) and the grants that almost
// matched, with why each did not, as the policy says.
//
// The audit log keeps no output and no file contents (it never keeps
// what a run printed or wrote), so the timeline shows outcomes, exit
// codes, paths and sizes, not excerpts or diffs.
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
	out := approvalContextBody{Timeline: []timelineItem{}}
	page, err := s.deps.Audit.Query(r.Context(), audit.Query{Tenant: v.Tenant, SessionID: v.SessionID, Limit: 100})
	if err != nil {
		return err
	}
	for _, rec := range page.Records {
		if it, ok := timelineOf(rec); ok && len(out.Timeline) < maxTimeline {
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
