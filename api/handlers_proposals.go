package api

import (
	"net/http"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

var errProposalsOff = errcode.New(errcode.NotFound, "proposals are not enabled on this gateway")

// proposalRoutes: an agent proposes a narrow exception for its session and
// reads the answer; an approver lists proposals with their replayed
// effect, accepts or rejects them, and revokes an accepted one. Proposals
// are kept in the approvals database, so any replica answers.
func (s *Server) proposalRoutes() {
	agent := []Role{RoleAgent}
	approvers := []Role{RoleApprover, RoleAdmin}
	s.handle("POST /v1/sessions/{id}/proposals", agent, s.propose)
	s.handle("GET /v1/sessions/{id}/proposals/{pid}", agent, s.getOwnProposal)
	s.handle("GET /v1/proposals", approvers, s.listProposals)
	s.handle("GET /v1/proposals/{pid}", approvers, s.getProposal)
	s.handle("POST /v1/proposals/{pid}/decision", approvers, s.decideProposal)
	s.handle("DELETE /v1/proposals/{pid}", approvers, s.revokeProposal)
}

// proposalBody is POST /v1/sessions/{id}/proposals.
type proposalBody struct {
	// Kind is egress_host (value: host or host:port), pattern (value: a
	// risk pattern id) or executor (value: a configured executor, which
	// the session's runs then use in place of the mode table's).
	Kind          string `json:"kind"`
	Value         string `json:"value"`
	Justification string `json:"justification"`
}

type proposalList struct {
	Proposals []confirm.Proposal `json:"proposals"`
}

func (s *Server) proposals() (*confirm.Proposals, error) {
	if s.deps.Approvals == nil || s.deps.Approvals.Proposals() == nil {
		return nil, errProposalsOff
	}
	return s.deps.Approvals.Proposals(), nil
}

// propose records the agent's proposal for its session, with the effect
// replayed, and answers 201 with it (status pending). The agent polls
// GET /v1/sessions/{id}/proposals/{pid} for the answer.
func (s *Server) propose(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.proposals()
	if err != nil {
		return err
	}
	p := principal(r)
	ref, err := s.deps.Manager.ResolveSession(p, r.PathValue("id"))
	if err != nil {
		return err
	}
	var body proposalBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	pr, err := ps.Propose(r.Context(), confirm.ProposalRequest{Tenant: ref.Tenant, SessionID: ref.ID, Principal: p.Role + ":" + p.Name,
		Kind: body.Kind, Value: body.Value, Justification: body.Justification})
	if err != nil {
		return proposalFieldErr(err)
	}
	writeJSON(w, http.StatusCreated, pr)
	return nil
}

func proposalFieldErr(err error) error {
	if err == confirm.ErrProposalExecutor {
		// Its own field code: the agent asked for an executor tier this
		// gateway does not have, which no rewording of the value fixes.
		return &fieldErr{field: manager.FieldError{Field: "value", Code: "unknown_executor", Message: err.Error()}}
	}
	if err == confirm.ErrProposalSessionEnded {
		// Its own field code: no decision applies to a proposal whose
		// session has ended (it was withdrawn then).
		return &fieldErr{field: manager.FieldError{Field: "decision", Code: "session_ended", Message: err.Error()}}
	}
	if err == confirm.ErrProposalWeakens {
		// Its own field code: an executor overlay may only keep or raise
		// isolation, so no session state makes this value acceptable.
		return &fieldErr{field: manager.FieldError{Field: "value", Code: "weakens_isolation", Message: err.Error()}}
	}
	for _, f := range []struct {
		err   error
		field string
	}{{confirm.ErrProposalKind, "kind"}, {confirm.ErrProposalValue, "value"}, {confirm.ErrProposalJustify, "justification"},
		{confirm.ErrProposalDecision, "decision"}, {confirm.ErrProposalFor, "for_s"}, {confirm.ErrReasonTooLong, "reason"}} {
		if err == f.err {
			return &fieldErr{field: fieldErrorOf(f.field, err.Error())}
		}
	}
	return err
}

// getOwnProposal is the agent's view of its session's proposal: its
// status, and the approver's reason once decided.
func (s *Server) getOwnProposal(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.proposals()
	if err != nil {
		return err
	}
	ref, err := s.deps.Manager.ResolveSession(principal(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	pr, err := ps.Get(r.Context(), confirm.Approver{Name: "agent", Tenants: []string{ref.Tenant}}, r.PathValue("pid"))
	if err != nil {
		return err
	}
	if pr.SessionID != ref.ID {
		return confirm.ErrProposalNotFound
	}
	writeJSON(w, http.StatusOK, pr)
	return nil
}

// listProposals is GET /v1/proposals?status=&tenant=&session_id=&limit=.
func (s *Server) listProposals(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.proposals()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := intParam(r, "limit", 100)
	if err != nil {
		return err
	}
	out, err := ps.List(r.Context(), approver(r), confirm.ProposalQuery{Status: q.Get("status"), Tenant: q.Get("tenant"),
		SessionID: q.Get("session_id"), Limit: limit})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, proposalList{Proposals: out})
	return nil
}

func (s *Server) getProposal(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.proposals()
	if err != nil {
		return err
	}
	pr, err := ps.Get(r.Context(), approver(r), r.PathValue("pid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pr)
	return nil
}

// decideProposal is POST /v1/proposals/{pid}/decision {decision: accept |
// reject, reason, for_s}: the first decision wins (409 after).
func (s *Server) decideProposal(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.proposals()
	if err != nil {
		return err
	}
	var d confirm.ProposalDecision
	if err := decodeJSON(r, &d); err != nil {
		return err
	}
	pr, err := ps.Decide(r.Context(), approver(r), r.PathValue("pid"), d)
	if err != nil {
		return proposalFieldErr(err)
	}
	writeJSON(w, http.StatusOK, pr)
	return nil
}

// revokeProposal ends an accepted proposal now (409 when not accepted).
func (s *Server) revokeProposal(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.proposals()
	if err != nil {
		return err
	}
	var body revokeBody
	if r.ContentLength > 0 {
		if err := decodeJSON(r, &body); err != nil {
			return err
		}
	}
	pr, err := ps.Revoke(r.Context(), approver(r), r.PathValue("pid"), body.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pr)
	return nil
}

func proposalOperations() []op {
	errs := []int{400, 401, 403, 404, 409, 500}
	return []op{
		{method: "POST", path: "/v1/sessions/{id}/proposals", id: "propose", tag: "proposals", roles: rolesAgent,
			summary: "Propose a narrow exception for the session after a denial (egress_host: host or host:port; pattern: a " +
				"risk pattern id; executor: a configured executor for the session's runs); the answer carries the effect replayed over the tenant's recent audit window",
			body: sch("ProposalRequest", proposalBody{}), ok: 201, okBody: sch("Proposal", confirm.Proposal{}), errs: errs},
		{method: "GET", path: "/v1/sessions/{id}/proposals/{pid}", id: "getOwnProposal", tag: "proposals", roles: rolesAgent,
			summary: "The session's proposal: its status and the approver's reason", ok: 200,
			okBody: sch("Proposal", confirm.Proposal{}), errs: errs},
		{method: "GET", path: "/v1/proposals", id: "listProposals", tag: "proposals", roles: rolesApprovers,
			summary: "Proposals with their effect, newest first",
			query: []param{q("status", "string", "pending, accepted, rejected or revoked"), q("tenant", "string", ""),
				q("session_id", "string", ""), q("limit", "integer", "default 100, at most 500")},
			ok: 200, okBody: sch("ProposalList", proposalList{}), errs: errs},
		{method: "GET", path: "/v1/proposals/{pid}", id: "getProposal", tag: "proposals", roles: rolesApprovers,
			summary: "One proposal", ok: 200, okBody: sch("Proposal", confirm.Proposal{}), errs: errs},
		{method: "POST", path: "/v1/proposals/{pid}/decision", id: "decideProposal", tag: "proposals", roles: rolesApprovers,
			summary: "Accept (an overlay with an owner and an expiry, in force at once) or reject (the agent reads the reason)",
			body:    sch("ProposalDecision", confirm.ProposalDecision{}), ok: 200, okBody: sch("Proposal", confirm.Proposal{}), errs: errs},
		{method: "DELETE", path: "/v1/proposals/{pid}", id: "revokeProposal", tag: "proposals", roles: rolesApprovers,
			summary: "Revoke an accepted proposal", body: sch("RevokeProposalRequest", revokeBody{}), ok: 200,
			okBody: sch("Proposal", confirm.Proposal{}), errs: errs},
	}
}
