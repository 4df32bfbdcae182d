package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
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

// Token is a bearer credential. Only its SHA-256 is kept, so the secret is
// not in memory longer than configuration parsing needs it.
type Token struct {
	Name string
	Role Role
	hash [sha256.Size]byte
}

// NewToken builds a Token from its secret.
func NewToken(name string, role Role, secret string) Token {
	return Token{Name: name, Role: role, hash: sha256.Sum256([]byte(secret))}
}

// Auth authenticates bearer tokens.
type Auth struct {
	tokens []Token
}

// ErrNoTokens is returned by NewAuth without tokens: the gateway never runs
// unauthenticated.
var ErrNoTokens = errors.New("no tokens configured")

// NewAuth builds an authenticator. It refuses an empty token set.
func NewAuth(tokens []Token) (*Auth, error) {
	if len(tokens) == 0 {
		return nil, ErrNoTokens
	}
	return &Auth{tokens: append([]Token(nil), tokens...)}, nil
}

// authenticate finds the token of r. Every configured token is compared, in
// constant time over fixed-length hashes, so neither the position of a match
// nor the secret's length shows in the timing.
func (a *Auth) authenticate(r *http.Request) (Token, bool) {
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return Token{}, false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	var found Token
	match := 0
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.hash[:]) == 1 {
			found, match = t, 1
		}
	}
	return found, match == 1
}
