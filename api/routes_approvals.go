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
	s.mount("GET /v1/approvals/ws", s.wrap(s.socketAuth(s.authorize(approvers, s.approvalSocket))))
	s.mount("GET /{$}", s.wrap(s.approvalPage))
	s.mount("GET /assets/{file}", s.wrap(s.approvalAsset))
	// Replica to replica (package fleet): answers only a request a peer
	// signed with the fleet key (forwarded), 404 to anyone else and on a
	// single gateway.
	s.mount("GET /v1/fleet/approvals/{id}", s.wrap(s.peerApproval))
	// An approval channel's callbacks (Slack's interactivity requests):
	// no bearer token, since the sender cannot hold one; the channel
	// verifies each request's signature (Slack's v0 scheme) and maps its
	// user to an approver, refusing and auditing anything else.
	s.mount("POST /v1/channels/{name}/callback", s.wrap(s.channelCallback))
	s.handle("GET /v1/approvals/{id}/context", approvers, s.approvalContext)
	s.grantRoutes()
	s.proposalRoutes()
}
