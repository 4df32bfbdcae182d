package api

import (
	"net/http"
	"strings"
)

// fileRoutes registers the workspace file endpoints (DESIGN.md §5
// "Workspace files"). Paths travel in the query string or the JSON body,
// never in the URL path, and the query is decoded exactly once.
func (s *Server) fileRoutes() {
	agent := []Role{RoleAgent}
	s.handleSession("GET /v1/sessions/{id}/files/content", agent, s.getFileContent)
	s.handleSession("PUT /v1/sessions/{id}/files/content", agent, s.putFileContent)
	s.handleSession("GET /v1/sessions/{id}/files/read", agent, s.readFile)
	s.handleSession("POST /v1/sessions/{id}/files/edit", agent, s.editFile)
	s.handleSession("GET /v1/sessions/{id}/files/list", agent, s.listFiles)
	s.handleSession("GET /v1/sessions/{id}/files/glob", agent, s.globFiles)
	s.handleSession("GET /v1/sessions/{id}/files/grep", agent, s.grepFiles)
	s.handleSession("DELETE /v1/sessions/{id}/files", agent, s.deleteFile)
}

// bodyLimit is the cap ServeHTTP puts on a request body: for a raw upload
// (PUT .../files/content) the workspace's file-size limit plus one byte,
// so that the workspace's own check is the one that trips and names the
// limit; the JSON cap for everything else. A path that only looks like an
// upload gets the larger cap and then a 404, without its body being read.
func (s *Server) bodyLimit(r *http.Request) int64 {
	if r.Method == http.MethodPut && s.deps.Manager != nil && isFileContentPath(r.URL.Path) {
		return s.deps.Manager.FileLimits().MaxFileBytes + 1
	}
	if s.deps.E2B != nil {
		if n := s.deps.E2B.BodyLimit(r); n > 0 {
			return n
		}
	}
	if s.deps.Daytona != nil {
		if n := s.deps.Daytona.BodyLimit(r); n > 0 {
			return n
		}
	}
	return s.cfg.MaxBodyBytes
}

// isFileContentPath matches /v1/sessions/{id}/files/content.
func isFileContentPath(p string) bool {
	parts := strings.Split(p, "/")
	return len(parts) == 6 && parts[0] == "" && parts[1] == "v1" && parts[2] == "sessions" &&
		parts[3] != "" && parts[4] == "files" && parts[5] == "content"
}
