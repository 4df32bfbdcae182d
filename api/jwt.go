package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// JWT bearer tokens (issue 14). An identity provider's JWT is accepted in
// place of a static token when it is signed with RS256 or ES256 by a key of
// the configured JWKS, names the configured audience (and issuer, when one
// is set), has not expired, and carries a role and a tenant in the
// configured claims. Signature checking and claim parsing are go-jose's;
// nothing here is cryptography.
//
// A JWT is never logged, and neither is a claim's value that failed: a
// refusal is a plain 401.

// Defaults of JWTConfig.
const (
	DefaultTenantClaim  = "tenant"
	DefaultRoleClaim    = "role"
	DefaultNameClaim    = "sub"
	DefaultTenantsClaim = "tenants"
	DefaultJWTLeeway    = 30 * time.Second
)

// jwtAlgorithms are the only signature algorithms accepted: RS256 and
// ES256, asymmetric, so the gateway holds no key that could mint a token.
// "none" and HMAC are refused before any key is looked at.
var jwtAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256}

// JWTConfig configures a JWTVerifier.
type JWTConfig struct {
	// Audience must be among the token's "aud". Required.
	Audience string
	// Issuer, when set, must be the token's "iss".
	Issuer string
	// Keys is where the verification keys come from. Required.
	Keys KeySource
	// TenantClaim, RoleClaim and NameClaim name the claims that give the
	// caller's tenant, role (agent, approver or admin) and name;
	// TenantsClaim an approver's tenant scope (a list; "*" is every
	// tenant; without it, an approver sees its own tenant only).
	TenantClaim, RoleClaim, NameClaim, TenantsClaim string
	// Leeway is the clock skew allowed on exp, nbf and iat.
	Leeway time.Duration
	// ValidTenant checks a tenant claim; nil accepts any non-empty one.
	ValidTenant func(string) error
}

// KeySource provides the JWKS. Keys returns the current set; a source
// that can fetch a newer one does so when refresh is true (a token named
// a key it does not hold), at most as often as it allows.
type KeySource interface {
	Keys(ctx context.Context, refresh bool) (*jose.JSONWebKeySet, error)
}

// JWTVerifier checks JWTs and maps them to identities.
type JWTVerifier struct {
	cfg JWTConfig
	now func() time.Time
}

// NewJWTVerifier checks cfg and builds a verifier.
func NewJWTVerifier(cfg JWTConfig) (*JWTVerifier, error) {
	if cfg.Audience == "" {
		return nil, errors.New("jwt: an audience is required")
	}
	if cfg.Keys == nil {
		return nil, errors.New("jwt: a key source is required")
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&cfg.TenantClaim, DefaultTenantClaim)
	def(&cfg.RoleClaim, DefaultRoleClaim)
	def(&cfg.NameClaim, DefaultNameClaim)
	def(&cfg.TenantsClaim, DefaultTenantsClaim)
	if cfg.Leeway <= 0 {
		cfg.Leeway = DefaultJWTLeeway
	}
	return &JWTVerifier{cfg: cfg, now: time.Now}, nil
}

// Errors of Verify, for tests and logs; the client sees 401 only.
var (
	ErrJWTMalformed = errors.New("jwt: not a signed JWT with an accepted algorithm")
	ErrJWTSignature = errors.New("jwt: no key of the JWKS verifies the signature")
	ErrJWTClaims    = errors.New("jwt: the claims do not grant access")
)

// Verify checks raw and returns the identity its claims give.
func (v *JWTVerifier) Verify(ctx context.Context, raw string) (Identity, error) {
	tok, err := jwt.ParseSigned(raw, jwtAlgorithms)
	if err != nil || len(tok.Headers) != 1 {
		return Identity{}, ErrJWTMalformed
	}
	var std jwt.Claims
	claims := map[string]any{}
	if err := v.verifySignature(ctx, tok, &std, &claims); err != nil {
		return Identity{}, err
	}
	if std.Expiry == nil {
		return Identity{}, fmt.Errorf("%w: no exp", ErrJWTClaims)
	}
	exp := jwt.Expected{Issuer: v.cfg.Issuer, AnyAudience: jwt.Audience{v.cfg.Audience}, Time: v.now()}
	if err := std.ValidateWithLeeway(exp, v.cfg.Leeway); err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrJWTClaims, err)
	}
	return v.identity(claims)
}

// verifySignature finds the key the token names (its kid, else every key
// that suits its algorithm) and decodes the claims with it. A kid the
// JWKS does not hold makes the source fetch again once (key rotation).
func (v *JWTVerifier) verifySignature(ctx context.Context, tok *jwt.JSONWebToken, dst ...any) error {
	h := tok.Headers[0]
	for _, refresh := range []bool{false, true} {
		set, err := v.cfg.Keys.Keys(ctx, refresh)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrJWTSignature, err)
		}
		keys := set.Keys
		if h.KeyID != "" {
			keys = set.Key(h.KeyID)
		}
		found := false
		for _, k := range keys {
			if !suits(k, h.Algorithm) {
				continue
			}
			found = true
			if tok.Claims(k.Public().Key, dst...) == nil {
				return nil
			}
		}
		if found {
			break // a key was there and did not verify: fetching again will not help
		}
	}
	return ErrJWTSignature
}

// suits reports whether k may verify a signature of alg: a public
// signature key (or a private one whose public half is used) of the
// algorithm's type, whose own alg, if it names one, is alg.
func suits(k jose.JSONWebKey, alg string) bool {
	if k.Use == "enc" || (k.Algorithm != "" && k.Algorithm != alg) || !k.Valid() {
		return false
	}
	switch alg {
	case string(jose.RS256):
		return isRSA(k.Public().Key)
	case string(jose.ES256):
		return isP256(k.Public().Key)
	}
	return false
}

// identity maps the verified claims to the caller.
func (v *JWTVerifier) identity(claims map[string]any) (Identity, error) {
	str := func(name string) string { s, _ := claims[name].(string); return s }
	role, err := ParseRole(str(v.cfg.RoleClaim))
	if err != nil {
		return Identity{}, fmt.Errorf("%w: claim %q is not a role", ErrJWTClaims, v.cfg.RoleClaim)
	}
	id := Identity{Name: str(v.cfg.NameClaim), Role: role, Tenant: str(v.cfg.TenantClaim)}
	if id.Name == "" {
		return Identity{}, fmt.Errorf("%w: no %q claim", ErrJWTClaims, v.cfg.NameClaim)
	}
	if err := v.validTenant(id.Tenant); err != nil {
		return Identity{}, fmt.Errorf("%w: claim %q: %w", ErrJWTClaims, v.cfg.TenantClaim, err)
	}
	if role == RoleApprover {
		if id.Tenants, err = v.scope(claims[v.cfg.TenantsClaim], id.Tenant); err != nil {
			return Identity{}, err
		}
	}
	return id, nil
}

func (v *JWTVerifier) validTenant(t string) error {
	if t == "" {
		return errors.New("empty")
	}
	if v.cfg.ValidTenant != nil {
		return v.cfg.ValidTenant(t)
	}
	return nil
}

// scope is an approver's tenants: the TenantsClaim's list, nil (every
// tenant) when it holds "*", or, without the claim, its own tenant only: an
// identity provider grants cross-tenant approval explicitly.
func (v *JWTVerifier) scope(claim any, own string) ([]string, error) {
	if claim == nil {
		return []string{own}, nil
	}
	list, ok := claim.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: claim %q is not a list", ErrJWTClaims, v.cfg.TenantsClaim)
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if s == "*" {
			return nil, nil
		}
		if !ok || v.validTenant(s) != nil {
			return nil, fmt.Errorf("%w: claim %q holds an invalid tenant", ErrJWTClaims, v.cfg.TenantsClaim)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: claim %q is empty", ErrJWTClaims, v.cfg.TenantsClaim)
	}
	return out, nil
}
