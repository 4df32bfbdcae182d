package api

import (
	"net/http"

	"github.com/sandgate/sandgate/manager"
)

// Pause and resume (issue 30): thin over the manager, which frees the
// session's processes and keeps what its executors can (a gVisor
// kernel's memory; the workspace everywhere). Any other request to a
// paused session resumes it, so resume is only needed to pay the restore
// ahead of a request.
func (s *Server) pauseRoutes() {
	agentOrAdmin := []Role{RoleAgent, RoleAdmin}
	s.handleSession("POST /v1/sessions/{id}/pause", agentOrAdmin, s.pauseSession)
	s.handleSession("POST /v1/sessions/{id}/resume", agentOrAdmin, s.resumeSession)
	s.handleSession("POST /v1/sessions/{id}/fork", []Role{RoleAgent}, s.forkSession)
	s.snapshotRoutes()
}

// forkBody is POST /v1/sessions/{id}/fork.
type forkBody struct {
	// Count is how many children to start (1 to manager.MaxForkCount).
	Count int `json:"count"`
}

func (s *Server) forkSession(w http.ResponseWriter, r *http.Request) error {
	var body forkBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	res, err := s.deps.Manager.ForkSession(r.Context(), principal(r), r.PathValue("id"), body.Count)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, res)
	return nil
}

func (s *Server) pauseSession(w http.ResponseWriter, r *http.Request) error {
	info, err := s.deps.Manager.PauseSession(r.Context(), principal(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) resumeSession(w http.ResponseWriter, r *http.Request) error {
	info, err := s.deps.Manager.ResumeSession(r.Context(), principal(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func pauseOperations() []op {
	return append(snapshotOperations(), []op{
		{method: "POST", path: "/v1/sessions/{id}/pause", id: "pauseSession", tag: "sessions", roles: rolesAgentAdmin,
			summary: "Pause the session: its containers and processes are freed; a gVisor kernel keeps its memory (checkpoint), other tiers keep the workspace and the next stateful run says kernel_restarted; 409 while a run is in flight",
			ok:      200, okBody: sch("SessionInfo", manager.SessionInfo{}), errs: []int{400, 401, 403, 404, 409, 429, 500}},
		{method: "POST", path: "/v1/sessions/{id}/resume", id: "resumeSession", tag: "sessions", roles: rolesAgentAdmin,
			summary: "Resume a paused session (any request to it does so too)",
			ok:      200, okBody: sch("SessionInfo", manager.SessionInfo{}), errs: errsSession},
		{method: "POST", path: "/v1/sessions/{id}/fork", id: "forkSession", tag: "sessions", roles: rolesAgent,
			summary: "Start count new sessions from this one: each has a copy of its workspace and, under gVisor, a restore of its kernel (random generators reseeded); grants and approvals do not carry over",
			body:    sch("ForkRequest", forkBody{}), ok: 201, okBody: sch("ForkResult", manager.ForkResult{}),
			errs: []int{400, 401, 403, 404, 409, 429, 500}},
	}...)
}
