package api

// browserRoutes registers POST /v1/sessions/{id}/browser (DESIGN.md §5
// "Browser"). Driving a browser is the agent's; approvers and admins read
// what it did in the audit log.
func (s *Server) browserRoutes() {
	s.handleSession("POST /v1/sessions/{id}/browser", []Role{RoleAgent}, s.browserAction)
}
