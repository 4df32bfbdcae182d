package egress

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/policy"
)

// Service is the egress proxy of one gateway: the per-run Handles share
// its policy, approvals cache, tunnel registry, credentials and CA.
type Service struct {
	cfg      Config
	deps     Deps
	log      *slog.Logger
	resolver Resolver
	own      []netip.Addr
	creds    map[string][]Credential // by lower-case host, in configuration order
	ca       *authority              // nil without a CA directory: nothing is intercepted

	mu sync.Mutex
	// approved holds the "allow for this session" answers, by session
	// key and host:port. Another session's key never matches.
	approved map[approvalKey]struct{}
	tunnels  map[string]map[*tunnel]struct{} // open tunnels by session key
}

type approvalKey struct{ session, target string }

// New builds the Service. The CA is loaded (or made) in cfg.CADir when
// one is given.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Policy == nil {
		return nil, errors.New("egress: Deps.Policy is required")
	}
	cfg = cfg.withDefaults()
	s := &Service{cfg: cfg, deps: deps, log: deps.Logger, resolver: deps.Resolver,
		creds: map[string][]Credential{}, approved: map[approvalKey]struct{}{}, tunnels: map[string]map[*tunnel]struct{}{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.resolver == nil {
		s.resolver = net.DefaultResolver
	}
	s.own = cfg.GatewayAddresses
	if s.own == nil {
		s.own = interfaceAddrs()
	}
	for _, c := range cfg.Credentials {
		host := strings.ToLower(strings.TrimSpace(c.Host))
		if host == "" || c.Header == "" || c.Value == "" {
			return nil, fmt.Errorf("egress: a credential needs a host, a header and a value (host %q)", c.Host)
		}
		for _, o := range s.creds[host] {
			if o.PathPrefix == c.PathPrefix && slices.Equal(o.Methods, c.Methods) {
				return nil, fmt.Errorf("egress: two credentials for host %q with the same methods and path prefix", host)
			}
		}
		s.creds[host] = append(s.creds[host], c)
	}
	if len(s.creds) > 0 && cfg.CADir == "" {
		return nil, errors.New("egress: credentials need a CA directory")
	}
	if cfg.CADir != "" {
		ca, err := loadOrCreateCA(cfg.CADir)
		if err != nil {
			return nil, err
		}
		s.ca = ca
	}
	return s, nil
}

// Handle returns the proxy as one run sees it: every connection it serves
// is decided and audited as b's.
func (s *Service) Handle(b Binding) *Handle { return &Handle{s: s, b: b} }

// ForRun is Handle as the manager asks for it (manager.EgressService).
func (s *Service) ForRun(b Binding) executors.Egress { return s.Handle(b) }

// CACertPEM is the gateway CA's certificate, or nil when no host is
// intercepted.
func (s *Service) CACertPEM() []byte {
	if s.ca == nil {
		return nil
	}
	return s.ca.certPEM
}

// ForgetSession drops a session's cached approvals (its deletion): a new
// session of the same name starts with none.
func (s *Service) ForgetSession(sessionKey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.approved {
		if k.session == sessionKey {
			delete(s.approved, k)
		}
	}
}

func (s *Service) sessionApproved(k approvalKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.approved[k]
	return ok
}

func (s *Service) approveSession(k approvalKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.approved[k] = struct{}{}
}

// hasCredential reports whether host has a credential bound: its
// connections are intercepted so it can be attached.
func (s *Service) hasCredential(host string) bool { return len(s.creds[host]) > 0 }

// credentialFor is the first credential of host that a request of method
// to path matches.
func (s *Service) credentialFor(host, method, path string) (Credential, bool) {
	for _, c := range s.creds[host] {
		if c.matches(method, path) {
			return c, true
		}
	}
	return Credential{}, false
}

// Handle is a run's connection to the proxy (executors.Egress).
type Handle struct {
	s *Service
	b Binding
}

// CACertPEM implements executors.Egress.
func (h *Handle) CACertPEM() []byte { return h.s.CACertPEM() }

// policyInput is the decision input for one connection of h's run.
func (h *Handle) policyInput(t target, addrs []netip.Addr) policy.EgressInput {
	return policy.EgressInput{
		Mode: h.s.cfg.Mode, Host: t.host, Port: t.port, Scheme: t.scheme,
		SessionID: h.b.SessionID, Tenant: h.b.Tenant, Principal: h.b.Principal, RequestID: h.b.RequestID,
		Risk: h.b.Risk, Resolved: addrStrings(addrs), GatewayAddresses: addrStrings(h.s.own),
	}
}

// Interface guards.
var _ executors.Egress = (*Handle)(nil)
