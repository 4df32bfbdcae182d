package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

// maxConnections caps GET /v1/approvals/connections.
const maxConnections = 100

var (
	errNoSession      = errcode.New(errcode.InvalidRequest, "session_id is required")
	errUnknownSession = errcode.New(errcode.NotFound, "no such session")
)

// connection is one egress connection as the approval page shows it next
// to a session's pending requests: what the session reached, or tried to.
// connectionList is GET /v1/approvals/connections's answer.
type connectionList struct {
	Connections []connection `json:"connections"`
}

type connection struct {
	Time       time.Time `json:"time"`
	RequestID  string    `json:"request_id"`
	Host       string    `json:"host"`
	Port       int       `json:"port"`
	Action     string    `json:"action"`
	Outcome    string    `json:"outcome"`
	Rule       string    `json:"rule"`
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS int64     `json:"duration_ms"`
}

// listConnections is GET /v1/approvals/connections?tenant=&session_id=&limit=:
// a session's recent egress connections, newest first, from the audit
// records (kind egress). Approvers read it (GET /v1/audit is admin-only);
// one limited to tenants gets not_found for any other tenant's session.
func (s *Server) listConnections(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	tenant, session := q.Get("tenant"), q.Get("session_id")
	if session == "" {
		return &fieldErr{field: fieldErrorOf("session_id", errNoSession.Message)}
	}
	if !approver(r).Sees(tenant) {
		return errUnknownSession
	}
	limit, err := intParam(r, "limit", 20)
	if err != nil {
		return err
	}
	if limit == 0 || limit > maxConnections {
		limit = maxConnections
	}
	page, err := s.deps.Audit.Query(r.Context(), audit.Query{Tenant: tenant, SessionID: session, Kind: "egress", Limit: limit})
	if err != nil {
		return err
	}
	out := make([]connection, 0, len(page.Records))
	for _, rec := range page.Records {
		d := rec.Detail
		port, _ := strconv.Atoi(d["port"])
		up, _ := strconv.ParseInt(d["bytes_up"], 10, 64)
		down, _ := strconv.ParseInt(d["bytes_down"], 10, 64)
		out = append(out, connection{Time: rec.Time, RequestID: rec.RequestID, Host: d["host"], Port: port,
			Action: rec.Action, Outcome: rec.Outcome, Rule: d["rule"], BytesUp: up, BytesDown: down, DurationMS: rec.DurationMS})
	}
	writeJSON(w, http.StatusOK, connectionList{Connections: out})
	return nil
}
