package api

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

// The admin audit endpoints (issue 31 point 5): the filtered list, one
// record, the hash chain's verification and the NDJSON export. They are
// what the page's audit view reads; every one is admin-only, since the
// log names every tenant's sessions and principals.
//
// A filter the store would silently ignore or misread is refused instead
// (400 invalid_request naming the parameter): a typo in a parameter's name
// must not show an administrator every record as if it matched.

var (
	errNoAuditChain = errcode.New(errcode.NotFound, "this gateway's audit store keeps no hash chain to verify")
	errNoAuditRec   = errcode.New(errcode.NotFound, "no audit record with this id")
)

// auditFilters are the query parameters of the list and the export;
// limit and cursor are the list's paging.
var auditFilters = map[string]bool{
	"tenant": true, "session_id": true, "kind": true, "outcome": true, "decision_id": true,
	"since": true, "until": true, "limit": true, "cursor": true,
}

var (
	// kindSyntax and outcomeSyntax are the spellings the gateway writes
	// (run_code, file.write, policy.reload; ok, denied, timed_out). The
	// sets are open (later request kinds add their own), so a filter is
	// held to the spelling, not to a list.
	kindSyntax    = regexp.MustCompile(`^[a-z][a-z0-9_.]{0,63}$`)
	outcomeSyntax = regexp.MustCompile(`^[a-z][a-z_]{0,31}$`)
)

// maxFilterLen bounds the free-text filters (tenant, session, decision).
const maxFilterLen = 256

// auditQuery reads and checks the filters of r.
func auditQuery(r *http.Request) (audit.Query, error) {
	vals := r.URL.Query()
	for name := range vals {
		if !auditFilters[name] {
			return audit.Query{}, &fieldErr{field: fieldErrorOf(name,
				"unknown filter; want tenant, session_id, kind, outcome, decision_id, since, until, limit or cursor")}
		}
	}
	q := audit.Query{Tenant: vals.Get("tenant"), SessionID: vals.Get("session_id"), Kind: vals.Get("kind"),
		Outcome: vals.Get("outcome"), DecisionID: vals.Get("decision_id")}
	for name, v := range map[string]string{"tenant": q.Tenant, "session_id": q.SessionID, "decision_id": q.DecisionID} {
		if len(v) > maxFilterLen {
			return q, &fieldErr{field: fieldErrorOf(name, "at most 256 bytes")}
		}
	}
	if q.Kind != "" && !kindSyntax.MatchString(q.Kind) {
		return q, &fieldErr{field: fieldErrorOf("kind", "a record kind, such as run_code, execute, egress or file.write")}
	}
	if q.Outcome != "" && !outcomeSyntax.MatchString(q.Outcome) {
		return q, &fieldErr{field: fieldErrorOf("outcome", "an outcome, such as ok, failed, denied, timed_out or error")}
	}
	var err error
	if q.Since, err = timeParam(r, "since"); err != nil {
		return q, err
	}
	if q.Until, err = timeParam(r, "until"); err != nil {
		return q, err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return q, &fieldErr{field: fieldErrorOf("until", "must be after since")}
	}
	if q.Limit, err = intParam(r, "limit", 100); err != nil {
		return q, err
	}
	cursor, err := intParam(r, "cursor", 0)
	q.Before = int64(cursor)
	return q, err
}

// timeParam is an RFC 3339 time, or zero when absent.
func timeParam(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, &fieldErr{field: fieldErrorOf(name, "an RFC 3339 time, such as 2026-11-27T16:00:00Z")}
	}
	return t, nil
}

// listAudit is GET /v1/audit with the filters of auditQuery, newest
// first. A session's records are those of tenant and session_id
// together: the same name under two tenants is two sessions.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	q, err := auditQuery(r)
	if err != nil {
		return err
	}
	page, err := s.deps.Audit.Query(r.Context(), q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// getAuditRecord is GET /v1/audit/records/{id}: one record, as stored
// (the view opens a broken link's record, which a filter may hide).
func (s *Server) getAuditRecord(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return &fieldErr{field: fieldErrorOf("id", "a record id: a positive integer")}
	}
	rec, err := s.auditRecord(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rec)
	return nil
}

func (s *Server) auditRecord(ctx context.Context, id int64) (audit.Record, error) {
	page, err := s.deps.Audit.Query(ctx, audit.Query{Before: id + 1, Limit: 1})
	if err != nil {
		return audit.Record{}, err
	}
	if len(page.Records) == 0 || page.Records[0].ID != id {
		return audit.Record{}, errNoAuditRec
	}
	return page.Records[0], nil
}
