package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/manager"
)

// Paths api mounts the server at. MetadataPath follows RFC 9728 §3.1: the
// well-known suffix goes between the host and the resource's path.
const (
	Path         = "/mcp"
	MetadataPath = "/.well-known/oauth-protected-resource/mcp"
)

// Defaults for Config.
const (
	DefaultSessionTimeout   = 30 * time.Minute
	DefaultProgressInterval = 5 * time.Second
)

// Config tunes the server. The zero value is usable.
type Config struct {
	// PublicURL is the gateway's base URL as clients reach it
	// ("https://gate.example.com", behind a TLS-terminating proxy). It
	// names the protected resource in the RFC 9728 metadata and the
	// approval page in elicitations. Empty: http:// and the request's Host.
	PublicURL string
	// AllowedHosts, when not empty, are the only Host header values
	// (host or host:port) accepted on /mcp: the DNS-rebinding guard for a
	// gateway that listens on a non-loopback address. On loopback the SDK
	// already refuses any Host that is not a loopback name.
	AllowedHosts []string
	// AllowedOrigins are browser origins ("https://app.example.com")
	// accepted besides the gateway's own. A request with any other Origin
	// is refused.
	AllowedOrigins []string
	// SessionTimeout closes an MCP session after this much inactivity
	// (no request from its client). Default 30 minutes.
	SessionTimeout time.Duration
	// ProgressInterval is the period of the progress notifications sent
	// while a call waits for approval. Default 5 s.
	ProgressInterval time.Duration
	// PurgeOnClose deletes the derived session's workspace when its MCP
	// session ends (its per-session state is released in any case).
	PurgeOnClose bool
	// Version is the server version reported at initialize.
	Version string
}

func (c *Config) applyDefaults() {
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.Version == "" {
		c.Version = "dev"
	}
}

// Deps are the server's collaborators, wired in main.
type Deps struct {
	Manager *manager.Manager
	// Browser is the router behind the browser tool; nil answers it with
	// executor_unavailable, as the HTTP endpoint does.
	Browser *browser.Manager
	// Fleet forwards a tool call to the replica that serves its session
	// (forward.go); nil serves every call here.
	Fleet  Fleet
	Logger *slog.Logger
}

// Server is the MCP server. It is safe for concurrent use.
type Server struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	public  *url.URL // nil: derived per request
	origins map[string]bool
	hosts   map[string]bool

	sdk     *sdk.Server
	handler http.Handler
	// tools are the tools' handlers by name, for calls another replica
	// forwards (ServeForwarded).
	tools map[string]func(ctx context.Context, c *call, raw json.RawMessage) *sdk.CallToolResult

	mu       sync.Mutex
	sessions map[string]*session // by MCP session id
	closed   bool
	posts    sync.WaitGroup // POSTs in flight (they carry the tool calls), counted while open
	wg       sync.WaitGroup // session watchers
}

// New checks the wiring and builds the server and its tools.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg.applyDefaults()
	if deps.Manager == nil {
		return nil, errors.New("mcp: no manager")
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Logger, sessions: map[string]*session{},
		tools:   map[string]func(context.Context, *call, json.RawMessage) *sdk.CallToolResult{},
		origins: map[string]bool{}, hosts: map[string]bool{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.PublicURL != "" {
		u, err := url.Parse(strings.TrimSuffix(cfg.PublicURL, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("mcp: public_url %q: want http(s)://host[:port][/path]", cfg.PublicURL)
		}
		s.public = u
	}
	for _, o := range cfg.AllowedOrigins {
		n, ok := normalizeOrigin(o)
		if !ok {
			return nil, fmt.Errorf("mcp: allowed origin %q: want scheme://host[:port]", o)
		}
		s.origins[n] = true
	}
	for _, h := range cfg.AllowedHosts {
		s.hosts[strings.ToLower(h)] = true
	}
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: "sandgate", Title: "sandgate", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions:       instructions,
		Logger:             s.log,
		InitializedHandler: s.initialized,
		// Tools only; no logging capability is advertised.
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{}},
	})
	s.addTools()
	streamable := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.sdk }, &sdk.StreamableHTTPOptions{
		SessionTimeout: cfg.SessionTimeout,
		Logger:         s.log,
	})
	// api has authenticated the request; RequireBearerToken only carries
	// the principal into the SDK as TokenInfo, whose UserID binds each MCP
	// session to the token that opened it.
	bind := sdkauth.RequireBearerToken(s.verify, &sdkauth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	s.handler = bind(streamable)
	return s, nil
}

// instructions are sent at initialize: what a model should know before it
// calls anything.
const instructions = `sandgate runs code, shell commands, file operations and browser actions in a sandbox, ` +
	`after a security policy has judged them. Files live under /workspace, which every tool and every run shares ` +
	`within a session. Risky requests may wait for a human approver (progress notifications say so) or be refused ` +
	`with a stable error code such as policy_denied, approval_denied or approval_timeout.`

// ServeMCP serves one request of an authenticated agent at Path. An error
// is returned, for api to render, only before anything was written: the
// request's Host or Origin is refused.
func (s *Server) ServeMCP(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	if err := s.checkHost(r); err != nil {
		return err
	}
	if err := s.checkOrigin(r); err != nil {
		return err
	}
	if r.Method == http.MethodPost && s.track() {
		defer s.posts.Done()
	}
	s.handler.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
	return nil
}

// track counts a POST in flight unless the server is closing. A POST ends
// once the responses to the calls it carried are written, which is what
// Close waits for; a tool call's own return would be too early.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.posts.Add(1)
	return true
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close is the server's part of a graceful shutdown: new tool calls are
// refused, those in flight may finish (their responses written) until ctx
// ends, then every MCP
// session is closed (their hanging streams would otherwise hold the HTTP
// server's shutdown to its deadline, and closing cancels calls still
// running), and their sessions' state is released. Main registers it with
// http.Server.RegisterOnShutdown.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	callsErr := waitCtx(ctx, &s.posts)
	for ss := range s.sdk.Sessions() {
		_ = ss.Close()
	}
	if err := waitCtx(ctx, &s.wg); err != nil {
		return fmt.Errorf("mcp: sessions still releasing: %w", err)
	}
	if callsErr != nil {
		return fmt.Errorf("mcp: tool calls cancelled at shutdown: %w", callsErr)
	}
	return nil
}

func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// baseURL is the gateway's base URL for r, without a trailing slash.
func (s *Server) baseURL(r *http.Request) string {
	if s.public != nil {
		return s.public.String()
	}
	scheme := "http"
	if r != nil && r.TLS != nil {
		scheme = "https"
	}
	host := "localhost"
	if r != nil && r.Host != "" {
		host = r.Host
	}
	return scheme + "://" + host
}
