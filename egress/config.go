package egress

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/policy"
)

// Defaults for Config.
const (
	DefaultHandshakeTimeout  = 10 * time.Second
	DefaultApprovalTimeout   = 120 * time.Second
	DefaultMaxTunnels        = 64
	DefaultDialTimeout       = 10 * time.Second
	DefaultRecentConnections = 20
	// DefaultUpgradeProtocol is the one protocol an upgrade may switch to
	// when Config.UpgradeProtocols is nil.
	DefaultUpgradeProtocol = "websocket"
	// maxHeadBytes caps a proxy request's line and headers.
	maxHeadBytes = 64 << 10
)

// Config configures the Service. Zero fields take the defaults above.
type Config struct {
	// Mode is the gateway's security mode, part of every decision.
	Mode string
	// HandshakeTimeout bounds everything before bytes flow: reading the
	// proxy request, resolving, dialing and reading the ClientHello. The
	// wait for a human is bounded by ApprovalTimeout instead.
	HandshakeTimeout time.Duration
	// ApprovalTimeout bounds the wait for an approver; the timeout is a
	// deny.
	ApprovalTimeout time.Duration
	// MaxTunnelsPerSession caps the connections a session has open at
	// once through the proxy; one over the cap is refused with 429.
	MaxTunnelsPerSession int
	// Credentials are the secrets bound to hosts. A host with one is
	// intercepted (TLS terminated with the gateway CA) so the header can
	// be attached; no other host is.
	Credentials []Credential
	// CADir is where the gateway CA is kept (ca.pem, ca-key.pem). It is
	// created when the Service is, so that a host a policy reload marks
	// for inspection can be inspected at once; empty means no host can be
	// intercepted (credentials are then refused, and an inspected host is
	// denied).
	CADir string
	// UpstreamRoots verifies upstream servers of intercepted hosts; nil
	// means the system roots. Tests add their server's certificate.
	UpstreamRoots *x509.CertPool
	// TLSPorts are the CONNECT ports that must carry TLS whose ClientHello
	// names the CONNECT host; default 443. Other ports are tunnelled as
	// they come (a rule must allow them first: the default port list is
	// 80 and 443).
	TLSPorts []int
	// GatewayAddresses are the host's own addresses, refused unless a rule
	// names them; nil means the addresses of every interface.
	GatewayAddresses []netip.Addr
	// ProposalEndpoint is where an agent proposes a narrow exception
	// (POST, kind egress_host), "{session}" standing for the session's
	// name, e.g. "/v1/sessions/{session}/proposals". A policy refusal
	// names it; empty: refusals name none.
	ProposalEndpoint string
	// UpgradeProtocols are the protocols a request may ask to switch to
	// (Upgrade, by name, any case: "websocket" passes "WebSocket" and
	// "websocket/13"); a request asking for any other ("tcp", "TLS/1.2")
	// is refused with 403 before the policy is asked, since what flows
	// after the switch is not inspected. nil means DefaultUpgradeProtocol;
	// an empty list refuses every upgrade.
	UpgradeProtocols []string
}

// Credential is a header the proxy adds to the requests to Host (HTTPS
// only: a secret is never sent in clear text) that match its Methods and
// PathPrefix; every other request goes out without it. Value is never
// logged or audited.
type Credential struct {
	Host   string
	Header string
	Value  string
	// Methods limits the credential to these methods (any case); empty
	// means every method.
	Methods []string
	// PathPrefix limits it to paths that start with the prefix (the path
	// as sent, compared byte for byte; paths with dot segments never reach
	// this point); empty means every path.
	PathPrefix string
}

// matches reports whether a request of method to path gets c.
func (c Credential) matches(method, path string) bool {
	if c.PathPrefix != "" && !strings.HasPrefix(path, c.PathPrefix) {
		return false
	}
	if len(c.Methods) == 0 {
		return true
	}
	for _, m := range c.Methods {
		if strings.EqualFold(m, method) {
			return true
		}
	}
	return false
}

// Decider is the policy engine (policy.Engine).
type Decider interface {
	DecideEgress(ctx context.Context, in policy.EgressInput) policy.EgressDecision
}

// Resolver resolves host names; *net.Resolver is one. Tests map their
// host names to services on 127.0.0.1.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Deps are the Service's collaborators.
type Deps struct {
	Policy Decider
	// Confirm asks humans; nil means require_approval is a deny.
	Confirm confirm.Service
	Audit   audit.Store
	// Resolver defaults to net.DefaultResolver.
	Resolver Resolver
	Metrics  *Metrics
	Logger   *slog.Logger
}

// Binding is who a Handle's connections belong to: the run they are made
// for. Every decision and audit record carries it.
type Binding struct {
	Tenant string
	// SessionID is the session's name within Tenant; SessionKey the
	// gateway-wide key (tenant and name together) approvals are cached
	// and tunnels counted under.
	SessionID  string
	SessionKey string
	Principal  string
	RequestID  string
	Risk       string
}

func (c Config) withDefaults() Config {
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.ApprovalTimeout <= 0 {
		c.ApprovalTimeout = DefaultApprovalTimeout
	}
	if c.TLSPorts == nil {
		c.TLSPorts = []int{443}
	}
	if c.MaxTunnelsPerSession <= 0 {
		c.MaxTunnelsPerSession = DefaultMaxTunnels
	}
	if c.UpgradeProtocols == nil {
		c.UpgradeProtocols = []string{DefaultUpgradeProtocol}
	}
	up := make([]string, len(c.UpgradeProtocols))
	for i, p := range c.UpgradeProtocols {
		up[i] = strings.ToLower(strings.TrimSpace(p))
	}
	c.UpgradeProtocols = up
	return c
}
