package mcp

import (
	"net/http"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// ServeMetadata answers the RFC 9728 protected-resource metadata of /mcp.
// It is public by design (clients read it before they have a token) and
// says only what the resource is and how a token is presented: sandgate's
// tokens come from its operator, so no authorization server is named.
func (s *Server) ServeMetadata(w http.ResponseWriter, r *http.Request) {
	base := s.baseURL(r)
	sdkauth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               base + Path,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "sandgate MCP server",
	}).ServeHTTP(w, r)
}

// MetadataURL is the metadata's absolute URL, for the resource_metadata
// parameter of a 401's WWW-Authenticate (RFC 9728 §5.1).
func (s *Server) MetadataURL(r *http.Request) string { return s.baseURL(r) + MetadataPath }
