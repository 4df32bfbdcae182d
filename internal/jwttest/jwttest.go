// Package jwttest is an identity provider for tests: it holds signing keys,
// publishes their JWKS and signs JWTs with go-jose, so the gateway's JWT
// checks are exercised against real RS256 and ES256 signatures.
package jwttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Key is one signing key and the kid it is published under.
type Key struct {
	ID        string
	Algorithm jose.SignatureAlgorithm
	Private   any
}

// NewRSA makes a 2048-bit RS256 key.
func NewRSA(t testing.TB, kid string) Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return Key{ID: kid, Algorithm: jose.RS256, Private: k}
}

// NewEC makes a P-256 ES256 key.
func NewEC(t testing.TB, kid string) Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return Key{ID: kid, Algorithm: jose.ES256, Private: k}
}

// JWKS is the public JWKS document of keys.
func JWKS(t testing.TB, keys ...Key) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range keys {
		jwk := jose.JSONWebKey{Key: k.Private, KeyID: k.ID, Algorithm: string(k.Algorithm), Use: "sig"}
		set.Keys = append(set.Keys, jwk.Public())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Claims are a token's claims: the registered ones and any others.
type Claims struct {
	jwt.Claims
	Extra map[string]any
}

// Standard returns registered claims for audience, valid from a minute
// ago for ttl.
func Standard(subject, issuer, audience string, ttl time.Duration) jwt.Claims {
	now := time.Now()
	return jwt.Claims{Subject: subject, Issuer: issuer, Audience: jwt.Audience{audience},
		IssuedAt: jwt.NewNumericDate(now.Add(-time.Minute)), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
		Expiry: jwt.NewNumericDate(now.Add(ttl))}
}

// Sign signs c with k, its kid in the header (unless noKid).
func Sign(t testing.TB, k Key, c Claims, noKid bool) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if !noKid {
		opts = opts.WithHeader("kid", k.ID)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.Algorithm, Key: k.Private}, opts)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(c.Claims).Claims(c.Extra).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// SignHS256 signs c with a shared secret: a token the gateway must refuse
// whatever its claims, since it accepts asymmetric signatures only.
func SignHS256(t testing.TB, secret []byte, kid string, c Claims) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: secret},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(c.Claims).Claims(c.Extra).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
