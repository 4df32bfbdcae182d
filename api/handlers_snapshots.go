package api

import (
	"net/http"

	"github.com/sandgate/sandgate/manager"
)

// Named snapshots (issue 30): thin over the manager. Taking one runs
// where the session is served (its kernel is there); listing and
// deleting read the snapshot directory, which every replica shares, so
// any replica answers them.
func (s *Server) snapshotRoutes() {
	s.handleSession("POST /v1/sessions/{id}/snapshots", []Role{RoleAgent}, s.createSnapshot)
	s.handle("GET /v1/snapshots", []Role{RoleAgent, RoleAdmin}, s.listSnapshots)
	s.handle("DELETE /v1/snapshots/{id}", []Role{RoleAgent, RoleAdmin}, s.deleteSnapshot)
}

// snapshotBody is POST /v1/sessions/{id}/snapshots.
type snapshotBody struct {
	// Name is unique in the tenant: 1 to 64 of [A-Za-z0-9._-].
	Name string `json:"name"`
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	var body snapshotBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	info, err := s.deps.Manager.CreateSnapshot(r.Context(), principal(r), r.PathValue("id"), body.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, info)
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	page, err := s.deps.Manager.ListSnapshots(r.Context(), principal(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	if err := s.deps.Manager.DeleteSnapshot(r.Context(), principal(r), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func snapshotOperations() []op {
	return []op{
		{method: "POST", path: "/v1/sessions/{id}/snapshots", id: "createSnapshot", tag: "sessions", roles: rolesAgent,
			summary: "Keep the session's state under a name (it goes on running): a copy of its workspace and, under gVisor, a checkpoint of its kernel; counted against the tenant's snapshot quota (429 quota_exceeded), kept for the configured retention",
			body:    sch("SnapshotRequest", snapshotBody{}), ok: 201, okBody: sch("SnapshotInfo", manager.SnapshotInfo{}),
			errs: []int{400, 401, 403, 404, 409, 429, 500, 503}},
		{method: "GET", path: "/v1/snapshots", id: "listSnapshots", tag: "sessions", roles: rolesAgentAdmin,
			summary: "The caller's tenant's snapshots, oldest first, with their sizes and expiry",
			ok:      200, okBody: sch("SnapshotPage", manager.SnapshotPage{}), errs: []int{401, 403, 429, 500, 503}},
		{method: "DELETE", path: "/v1/snapshots/{id}", id: "deleteSnapshot", tag: "sessions", roles: rolesAgentAdmin,
			summary: "Delete one of the tenant's snapshots and its files; another tenant's is not found",
			ok:      204, errs: []int{401, 403, 404, 429, 500, 503}},
	}
}
