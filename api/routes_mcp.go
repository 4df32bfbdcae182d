package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sandgate/sandgate/manager"
)

// MCPServer is the MCP endpoint (package mcp), wired in main. api
// authenticates its requests as any other agent request and hands it the
// principal; the metadata is public.
type MCPServer interface {
	// ServeMCP serves one request at /mcp. An error is returned, for the
	// one error writer, only before anything was written.
	ServeMCP(w http.ResponseWriter, r *http.Request, p manager.Principal) error
	// ServeMetadata answers the RFC 9728 protected-resource metadata.
	ServeMetadata(w http.ResponseWriter, r *http.Request)
	// MetadataURL is the metadata's absolute URL as r sees the gateway.
	MetadataURL(r *http.Request) string
	// ServeForwarded runs a tool call another replica forwarded (a
	// verified hop), authenticated as p from the client's credential.
	ServeForwarded(w http.ResponseWriter, r *http.Request, p manager.Principal, requestID string) error
}

// Paths of the MCP endpoint. The metadata lives where RFC 9728 §3.1 puts
// it for the resource /mcp, and at the host's root for clients that look
// there first.
const (
	mcpPath         = "/mcp"
	mcpMetadataPath = "/.well-known/oauth-protected-resource/mcp"
	rootMetadata    = "/.well-known/oauth-protected-resource"
	mcpForwardPath  = "/v1/fleet/mcp/call"
)

func (s *Server) mcpRoutes() {
	if s.deps.MCP == nil {
		return
	}
	agent := s.authorize([]Role{RoleAgent}, func(w http.ResponseWriter, r *http.Request) error {
		return s.deps.MCP.ServeMCP(w, r, principal(r))
	})
	s.mount(mcpPath, s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		err := agent(w, r)
		if errors.Is(err, errUnauthorized) {
			// RFC 9728 §5.1: tell the client where the metadata is.
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="sandgate", resource_metadata=%q`, s.deps.MCP.MetadataURL(r)))
		}
		return err
	}))
	s.handle("POST "+mcpForwardPath, []Role{RoleAgent}, func(w http.ResponseWriter, r *http.Request) error {
		if !forwarded(r.Context()) {
			return errNotFound // only a replica of the fleet, with a verified hop, calls it
		}
		return s.deps.MCP.ServeForwarded(w, r, principal(r), requestID(r.Context()))
	})
	meta := http.HandlerFunc(s.deps.MCP.ServeMetadata)
	for _, p := range []string{mcpMetadataPath, rootMetadata} {
		s.mount("GET "+p, meta)
		s.mount("OPTIONS "+p, meta)
	}
}
