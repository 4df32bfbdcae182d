package mcp

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// Refusals of the guard. They are rendered by api with the usual body.
var (
	errHost   = errcode.New(errcode.Forbidden, "this Host is not accepted on the MCP endpoint")
	errOrigin = errcode.New(errcode.Forbidden, "cross-origin requests to the MCP endpoint are refused")
)

type principalKey struct{}

func withPrincipal(ctx context.Context, p manager.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principalFrom(ctx context.Context) (manager.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(manager.Principal)
	return p, ok
}

// verify is the SDK's token verifier. The token was checked by api, which
// put the principal in the context; verify turns it into the SDK's
// TokenInfo, which reaches every tool call (RequestExtra.TokenInfo) with the
// gateway's base URL as this request saw it. UserID is what the SDK binds a
// session to: a request naming a session opened by another principal gets
// 403.
func (s *Server) verify(ctx context.Context, _ string, r *http.Request) (*sdkauth.TokenInfo, error) {
	p, ok := principalFrom(ctx)
	if !ok {
		return nil, sdkauth.ErrInvalidToken
	}
	return &sdkauth.TokenInfo{UserID: userID(p), Extra: map[string]any{
		extraPrincipal: p, extraBaseURL: s.baseURL(r),
	}}, nil
}

// Keys of TokenInfo.Extra.
const (
	extraPrincipal = "sandgate.principal"
	extraBaseURL   = "sandgate.base_url"
)

// principalOf is the principal of a message, from what verify attached.
func principalOf(extra *sdk.RequestExtra) (manager.Principal, bool) {
	if extra == nil || extra.TokenInfo == nil {
		return manager.Principal{}, false
	}
	p, ok := extra.TokenInfo.Extra[extraPrincipal].(manager.Principal)
	return p, ok
}

// baseURLOf is the gateway's base URL as the message's HTTP request saw it.
func baseURLOf(extra *sdk.RequestExtra) string {
	if extra == nil || extra.TokenInfo == nil {
		return ""
	}
	u, _ := extra.TokenInfo.Extra[extraBaseURL].(string)
	return u
}

// userID names a principal for the session binding: role and name (a
// token's name is unique in the configuration).
func userID(p manager.Principal) string { return p.Role + ":" + p.Tenant + ":" + p.Name }

// checkHost refuses a Host outside Config.AllowedHosts, when it is set.
// (Loopback listeners get the SDK's own check on top: no non-loopback Host
// at all.)
func (s *Server) checkHost(r *http.Request) error {
	if len(s.hosts) == 0 {
		return nil
	}
	h := strings.ToLower(r.Host)
	if s.hosts[h] {
		return nil
	}
	if host, _, err := net.SplitHostPort(h); err == nil && s.hosts[host] {
		return nil
	}
	return errHost
}

// checkOrigin refuses a request whose Origin is neither the gateway's own
// nor allowed, whatever its method (MCP's transport rules ask servers to
// validate Origin on every connection), and any request a browser marks as
// cross-site through Fetch metadata.
func (s *Server) checkOrigin(r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" {
		n, ok := normalizeOrigin(o)
		if !ok || !(s.origins[n] || s.sameOrigin(r, n)) {
			return errOrigin
		}
		return nil
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return nil
	}
	return errOrigin
}

// sameOrigin reports whether origin n is the gateway's own: the origin of
// its public URL when one is configured, or the scheme and Host the request
// came with.
func (s *Server) sameOrigin(r *http.Request, n string) bool {
	if s.public != nil {
		if own, ok := normalizeOrigin(s.public.Scheme + "://" + s.public.Host); ok && own == n {
			return true
		}
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	own, ok := normalizeOrigin(scheme + "://" + r.Host)
	return ok && own == n
}

// normalizeOrigin lowercases scheme and host and drops default ports:
// "HTTPS://Gate.example.com:443" is "https://gate.example.com". Anything
// but a bare http(s) origin is rejected.
func normalizeOrigin(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host, true
}
