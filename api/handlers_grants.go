package api

import (
	"net/http"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/errcode"
)

var errGrantsOff = errcode.New(errcode.NotFound, "grants are not enabled on this gateway")

// grantRoutes are the grants' endpoints: an approver lists the grants of
// the tenants it sees, reads one, and revokes one. Grants are given by
// approving with scope "session" or "pattern" and for_s
// (POST /v1/approvals/{id}/decision, the page, a channel); an egress grant
// by approving a held egress request with scope "session", for_s and
// path_prefix (kind egress: method, host, port and path_prefix say what it
// covers; confirm/grants_egress.go).
func (s *Server) grantRoutes() {
	approvers := []Role{RoleApprover, RoleAdmin}
	s.handle("GET /v1/grants", approvers, s.listGrants)
	s.handle("GET /v1/grants/{id}", approvers, s.getGrant)
	s.handle("DELETE /v1/grants/{id}", approvers, s.revokeGrant)
}

type grantList struct {
	Grants []confirm.Grant `json:"grants"`
}

type revokeBody struct {
	Reason string `json:"reason"`
}

func (s *Server) grants() (*confirm.Grants, error) {
	if s.deps.Approvals == nil || s.deps.Approvals.Grants() == nil {
		return nil, errGrantsOff
	}
	return s.deps.Approvals.Grants(), nil
}

// listGrants is GET /v1/grants?tenant=&session_id=&live=true&limit=: newest
// first; session_id includes the tenant-wide grants that apply to it, and
// live=true leaves out the expired and revoked.
func (s *Server) listGrants(w http.ResponseWriter, r *http.Request) error {
	g, err := s.grants()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := intParam(r, "limit", 100)
	if err != nil {
		return err
	}
	out, err := g.List(r.Context(), approver(r), confirm.GrantQuery{Tenant: q.Get("tenant"), SessionID: q.Get("session_id"),
		Live: q.Get("live") == "true", Limit: limit})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, grantList{Grants: out})
	return nil
}

func (s *Server) getGrant(w http.ResponseWriter, r *http.Request) error {
	g, err := s.grants()
	if err != nil {
		return err
	}
	gr, err := g.Get(r.Context(), approver(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, gr)
	return nil
}

// revokeGrant is DELETE /v1/grants/{id} with an optional {reason}: the
// grant covers nothing from now on; the revocation is audited
// (grant.revoked). A second revocation is 409.
func (s *Server) revokeGrant(w http.ResponseWriter, r *http.Request) error {
	g, err := s.grants()
	if err != nil {
		return err
	}
	var body revokeBody
	if r.ContentLength > 0 {
		if err := decodeJSON(r, &body); err != nil {
			return err
		}
	}
	gr, err := g.Revoke(r.Context(), approver(r), r.PathValue("id"), body.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, gr)
	return nil
}

func grantOperations() []op {
	return []op{
		{method: "GET", path: "/v1/approvals/{id}/context", id: "approvalContext", tag: "grants", roles: rolesApprovers,
			summary: "Context for deciding an approval: the session's recent timeline (runs, file changes, connections) and the grants that almost matched, with why",
			ok:      200, okBody: sch("ApprovalContext", approvalContextBody{}), errs: errsApproval},
		{method: "GET", path: "/v1/grants", id: "listGrants", tag: "grants", roles: rolesApprovers,
			summary: "Grants (standing approvals), newest first",
			query: []param{q("tenant", "string", ""), q("session_id", "string", "this session's grants and its tenant's"),
				q("live", "boolean", "only those neither expired nor revoked"), q("limit", "integer", "default 100, at most 500")},
			ok: 200, okBody: sch("GrantList", grantList{}), errs: errsApproval},
		{method: "GET", path: "/v1/grants/{id}", id: "getGrant", tag: "grants", roles: rolesApprovers,
			summary: "One grant", ok: 200, okBody: sch("Grant", confirm.Grant{}), errs: errsApproval},
		{method: "DELETE", path: "/v1/grants/{id}", id: "revokeGrant", tag: "grants", roles: rolesApprovers,
			summary: "Revoke a grant (audited); 409 when already revoked", body: sch("RevokeGrantRequest", revokeBody{}),
			ok: 200, okBody: sch("Grant", confirm.Grant{}), errs: []int{400, 401, 403, 404, 409, 500}},
	}
}
