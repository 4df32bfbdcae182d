package api

// fileRoutes registers the workspace file endpoints (DESIGN.md §5
// "Workspace files").
func (s *Server) fileRoutes() {}
