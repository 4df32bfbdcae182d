package api

// approvalRoutes registers the approval endpoints, the WebSocket and the
// approval page (DESIGN.md §5 "Approvals").
//
// Only approver and admin tokens may list, read or decide approvals, or open
// the socket; an agent token gets 403 on every one of them. The page and its
// assets are static and public: they hold no data, and the page
// authenticates its socket with the approver's token.
func (s *Server) approvalRoutes() {
	approvers := []Role{RoleApprover, RoleAdmin}
	s.handle("GET /v1/approvals", approvers, s.listApprovals)
	s.handle("GET /v1/approvals/connections", approvers, s.listConnections)
	s.handle("GET /v1/approvals/{id}", approvers, s.getApproval)
	s.handle("POST /v1/approvals/{id}/decision", approvers, s.decideApproval)
	s.mux.Handle("GET /v1/approvals/ws", s.wrap(s.socketAuth(s.authorize(approvers, s.approvalSocket))))
	s.mux.Handle("GET /{$}", s.wrap(s.approvalPage))
	s.mux.Handle("GET /assets/{file}", s.wrap(s.approvalAsset))
}
