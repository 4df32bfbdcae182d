package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

// auditVerification is GET /v1/audit/verify's answer: 200 whether or not
// the chains verify (the check ran; Verified says what it found).
type auditVerification struct {
	Verified  bool      `json:"verified"`
	CheckedAt time.Time `json:"checked_at"`
	// Records counts the records checked, per replica's chain.
	Records map[string]int `json:"records"`
	Total   int            `json:"total"`
	// Broken names the first record of each chain that does not verify.
	Broken []brokenLink `json:"broken,omitempty"`
}

// brokenLink is a chain's first bad record, with the record as it is
// stored now (edited, say), so the view can name and open it.
type brokenLink struct {
	audit.BrokenLink
	Record *audit.Record `json:"record,omitempty"`
}

// verifyAudit is GET /v1/audit/verify[?replica=]: every replica's hash
// chain (or one) recomputed from the first record, as `gateway audit
// verify` does. It reads the whole log: an administrator's check, not
// something to poll.
func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request) error {
	for name := range r.URL.Query() {
		if name != "replica" {
			return &fieldErr{field: fieldErrorOf(name, "unknown parameter; want replica")}
		}
	}
	replica := r.URL.Query().Get("replica")
	if len(replica) > maxFilterLen {
		return &fieldErr{field: fieldErrorOf("replica", "at most 256 bytes")}
	}
	if s.deps.AuditChain == nil {
		return errNoAuditChain
	}
	rep, err := audit.Verify(r.Context(), s.deps.AuditChain, replica)
	if err != nil {
		return err
	}
	out := auditVerification{Verified: len(rep.Broken) == 0, CheckedAt: time.Now().UTC(), Records: rep.Records}
	for _, n := range rep.Records {
		out.Total += n
	}
	var names []string
	for _, b := range rep.Broken {
		link := brokenLink{BrokenLink: b}
		if rec, err := s.auditRecord(r.Context(), b.ID); err == nil {
			link.Record = &rec
		}
		out.Broken = append(out.Broken, link)
		names = append(names, b.Replica+":"+strconv.FormatInt(b.ID, 10))
	}
	if err := s.auditOwn(r, kindAuditVerify, map[string]string{"verified": strconv.FormatBool(out.Verified),
		"records": strconv.Itoa(out.Total), "broken": strings.Join(names, ",")}); err != nil {
		return err
	}
	s.extendWrite(w)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// exportPage is how many records the export reads per query: the
// store's largest page.
const exportPage = audit.DefaultMaxQueryLimit

// exportAudit is GET /v1/audit/export: the records the same filters
// select, as application/x-ndjson (one record per line, newest first, the
// list's JSON), to download. limit caps the records exported (absent or
// 0: all); cursor starts below a record id. The filters are checked before
// the answer starts; a store failure after that ends the stream with one
// last line {"error": {...}}, so a truncated export never looks complete.
func (s *Server) exportAudit(w http.ResponseWriter, r *http.Request) error {
	q, err := auditQuery(r)
	if err != nil {
		return err
	}
	left := -1 // every record the filters select
	if r.URL.Query().Get("limit") != "" && q.Limit > 0 {
		left = q.Limit
	}
	q.Limit = exportPage
	if err := s.auditOwn(r, kindAuditExport, map[string]string{"query": cutString(r.URL.RawQuery, 2048)}); err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", mediaNDJSON)
	h.Set("Content-Disposition", `attachment; filename="sandgate-audit-`+time.Now().UTC().Format("20060102T150405Z")+`.ndjson"`)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	for left != 0 {
		if left > 0 {
			q.Limit = min(left, exportPage)
		}
		page, err := s.deps.Audit.Query(r.Context(), q)
		if err != nil {
			s.log.ErrorContext(r.Context(), "audit export failed", "request_id", requestID(r.Context()), "err", err)
			_ = enc.Encode(errorBody{Error: errorDetail{Code: errcode.Internal,
				Message: "the export stopped: the audit store failed", RequestID: requestID(r.Context())}})
			return nil
		}
		s.extendWrite(w)
		for i := range page.Records {
			if err := enc.Encode(&page.Records[i]); err != nil {
				return nil // the client went away
			}
		}
		_ = rc.Flush()
		if left > 0 {
			left -= len(page.Records)
		}
		if page.NextCursor == 0 {
			break
		}
		q.Before = page.NextCursor
	}
	return nil
}

// The records the audit endpoints write themselves. A check and an
// export are an administrator reading the whole log (or taking it away):
// each is recorded, in the chain it reads, before its answer, and a
// record that cannot be written refuses the answer (500), as every
// request that returns data is refused when the audit cannot be written.
// The list and a single record, which the page reads as it is used, are
// not.
const (
	kindAuditVerify = "audit.verify"
	kindAuditExport = "audit.export"
)

func (s *Server) auditOwn(r *http.Request, kind string, detail map[string]string) error {
	id := identity(r)
	rec := &audit.Record{RequestID: requestID(r.Context()), Kind: kind, Tenant: id.Tenant,
		Principal: string(id.Role) + ":" + id.Name, Outcome: audit.OutcomeOK, HTTPStatus: http.StatusOK, Detail: detail}
	if err := s.deps.Audit.Append(r.Context(), rec); err != nil {
		return fmt.Errorf("api: %s record: %w", kind, err)
	}
	return nil
}

// cutString is s, at most n bytes of it.
func cutString(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// extendWrite gives a long answer (a whole-log check or export) a fresh
// write deadline, as a streamed run has, in place of the server's.
func (s *Server) extendWrite(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout))
}

func auditOperations() []op {
	filters := []param{q("tenant", "string", ""), q("session_id", "string", ""),
		q("kind", "string", "run_code, execute, egress, file.write, ..."), q("outcome", "string", "ok, failed, denied, timed_out, ..."),
		q("decision_id", "string", "the record of one policy decision (a decision-log event's decision_id)"),
		q("since", "string", "RFC 3339; records at or after it"), q("until", "string", "RFC 3339; records before it")}
	page := []param{q("limit", "integer", "default 100, at most 1000"), q("cursor", "integer", "next_cursor of the previous page")}
	return []op{
		{method: "GET", path: "/v1/audit", id: "listAudit", tag: "audit", roles: rolesAdmin,
			summary: "Audit records, newest first; an unknown or malformed filter is a 400 naming it",
			query:   append(append([]param{}, filters...), page...), ok: 200, okBody: sch("AuditPage", audit.Page{}), errs: errsAdmin},
		{method: "GET", path: "/v1/audit/records/{id}", id: "getAuditRecord", tag: "audit", roles: rolesAdmin,
			summary: "One audit record, as stored", ok: 200, okBody: sch("AuditRecord", audit.Record{}), errs: []int{400, 401, 403, 404, 500}},
		{method: "GET", path: "/v1/audit/verify", id: "verifyAudit", tag: "audit", roles: rolesAdmin,
			summary: "Recompute every replica's hash chain (or one); broken names each chain's first bad record, with the record",
			query:   []param{q("replica", "string", "one replica's chain")},
			ok:      200, okBody: sch("AuditVerification", auditVerification{}), errs: []int{400, 401, 403, 404, 500}},
		{method: "GET", path: "/v1/audit/export", id: "exportAudit", tag: "audit", roles: rolesAdmin,
			summary: "The records the filters select as NDJSON (one record per line, newest first), to download",
			query: append(append([]param{}, filters...), q("limit", "integer", "at most this many records (absent or 0: all)"),
				q("cursor", "integer", "start below this record id")),
			ok: 200, okLines: sch("AuditRecord", audit.Record{}), errs: errsAdmin},
	}
}
