package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Role is what a token may do.
type Role string

// The three roles of DESIGN.md §5.
const (
	RoleAgent    Role = "agent"
	RoleApprover Role = "approver"
	RoleAdmin    Role = "admin"
)

// ParseRole accepts exactly the three role names.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAgent, RoleApprover, RoleAdmin:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q (want agent, approver or admin)", s)
}

// Identity is an authenticated caller: a static token's or a JWT's. It
// never holds the credential itself.
type Identity struct {
	// Name identifies the credential's owner (a token's name, a JWT's
	// subject); it is what audit records and decided_by show.
	Name string
	Role Role
	// Tenant owns the sessions this caller creates (DESIGN.md §5).
	Tenant string
	// Tenants limits an approver to these tenants' approvals; empty means
	// every tenant. Ignored for other roles.
	Tenants []string
}

// Token is a bearer credential. Only its SHA-256 is kept: a configured
// secret is hashed at start, and a "sha256:" token is configured as that
// hash, so the secret is never in the configuration at all.
type Token struct {
	Identity
	hash [sha256.Size]byte
}

// NewToken builds a Token from its secret. Its tenant is its name, the
// default that keeps single-team setups unchanged; set Tenant to override.
func NewToken(name string, role Role, secret string) Token {
	return NewHashedToken(name, role, sha256.Sum256([]byte(secret)))
}

// NewHashedToken builds a Token from the SHA-256 of its secret.
func NewHashedToken(name string, role Role, sum [sha256.Size]byte) Token {
	return Token{Identity: Identity{Name: name, Role: role, Tenant: name}, hash: sum}
}

// Auth authenticates bearer credentials: static tokens and, when a
// JWTVerifier is given, JWTs.
type Auth struct {
	tokens []Token
	jwt    *JWTVerifier
}

// ErrNoTokens is returned by NewAuth without tokens or JWTs: the gateway
// never runs unauthenticated.
var ErrNoTokens = errors.New("no tokens configured")

// AuthOption configures NewAuth.
type AuthOption func(*Auth)

// WithJWT also accepts the JWTs v verifies.
func WithJWT(v *JWTVerifier) AuthOption { return func(a *Auth) { a.jwt = v } }

// NewAuth builds an authenticator. It refuses to authenticate nobody: it
// needs at least one token, or a JWT verifier.
func NewAuth(tokens []Token, opts ...AuthOption) (*Auth, error) {
	a := &Auth{tokens: slices.Clone(tokens)}
	for _, o := range opts {
		o(a)
	}
	if len(a.tokens) == 0 && a.jwt == nil {
		return nil, ErrNoTokens
	}
	for i := range a.tokens {
		a.tokens[i].Tenants = slices.Clone(a.tokens[i].Tenants)
	}
	return a, nil
}

// authenticate finds the identity behind r's bearer credential. Static
// tokens come first: every configured token is compared, in constant time
// over fixed-length hashes, so neither the position of a match nor the
// secret's length shows in the timing. A credential that is no token is
// then tried as a JWT, when JWTs are accepted.
func (a *Auth) authenticate(r *http.Request) (Identity, bool) {
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return Identity{}, false
	}
	sum := sha256.Sum256([]byte(secret))
	var found Token
	match := 0
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.hash[:]) == 1 {
			found, match = t, 1
		}
	}
	if match == 1 {
		return found.Identity, true
	}
	if a.jwt != nil && looksLikeJWT(secret) {
		id, err := a.jwt.Verify(r.Context(), secret)
		return id, err == nil
	}
	return Identity{}, false
}

// looksLikeJWT is a compact JWS: three dot-separated segments.
func looksLikeJWT(s string) bool { return strings.Count(s, ".") == 2 }

// ParseSecret reads a configured token: the secret itself, or "sha256:"
// and the 64 hex digits of its SHA-256, so that a configuration file need
// not hold the secret. It returns the hash either way.
func ParseSecret(s string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h, ok := strings.CutPrefix(s, HashPrefix)
	if !ok {
		return sha256.Sum256([]byte(s)), nil
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return sum, fmt.Errorf("a %s token must be followed by the 64 hex digits of the secret's SHA-256", HashPrefix)
	}
	copy(sum[:], b)
	return sum, nil
}

// HashPrefix marks a configured token given as its SHA-256.
const HashPrefix = "sha256:"
