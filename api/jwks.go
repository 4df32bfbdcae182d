package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// minRSABits refuses RSA keys too short to trust, whatever the JWKS says.
const minRSABits = 2048

func isRSA(k any) bool {
	pk, ok := k.(*rsa.PublicKey)
	return ok && pk.N.BitLen() >= minRSABits
}

func isP256(k any) bool {
	pk, ok := k.(*ecdsa.PublicKey)
	return ok && pk.Curve == elliptic.P256()
}

// Defaults of the JWKS sources.
const (
	// DefaultJWKSRefresh is how long fetched keys are used before the URL
	// is fetched again.
	DefaultJWKSRefresh = 10 * time.Minute
	// DefaultJWKSMinInterval bounds how often a token naming an unknown
	// key may make the source fetch again, so a stream of forged kids
	// cannot turn the gateway into a load on the identity provider.
	DefaultJWKSMinInterval = 30 * time.Second
	maxJWKSBytes           = 1 << 20
)

// ParseJWKS decodes a JWKS document, refusing one without keys.
func ParseJWKS(b []byte) (*jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("jwks: no keys")
	}
	return &set, nil
}

// cachedKeys is what a source loaded last, and when.
type cachedKeys struct {
	mu      sync.Mutex
	set     *jose.JSONWebKeySet
	fetched time.Time
	tried   time.Time // last load attempt, successful or not
	minGap  time.Duration
	maxAge  time.Duration
	load    func(ctx context.Context) (*jose.JSONWebKeySet, error)
}

// keys returns the set, loading it when there is none, when it is older
// than maxAge, or when refresh asks and the last attempt is minGap old. A
// failed load keeps the last good set.
func (c *cachedKeys) keys(ctx context.Context, refresh bool) (*jose.JSONWebKeySet, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	stale := c.set == nil || (c.maxAge > 0 && now.Sub(c.fetched) > c.maxAge) || refresh
	if stale && (c.set == nil || now.Sub(c.tried) >= c.minGap) {
		c.tried = now
		set, err := c.load(ctx)
		switch {
		case err == nil:
			c.set, c.fetched = set, now
		case c.set == nil:
			return nil, err
		}
	}
	return c.set, nil
}

// JWKSFile reads the JWKS from a file: at start, and again when a token
// names a key the file did not hold (the file was rotated), at most every
// DefaultJWKSMinInterval.
type JWKSFile struct{ c cachedKeys }

// NewJWKSFile loads path, failing when it holds no usable JWKS.
func NewJWKSFile(ctx context.Context, path string) (*JWKSFile, error) {
	f := &JWKSFile{c: cachedKeys{minGap: DefaultJWKSMinInterval, load: func(context.Context) (*jose.JSONWebKeySet, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("jwks file: %w", err)
		}
		return ParseJWKS(b)
	}}}
	if _, err := f.c.keys(ctx, false); err != nil {
		return nil, err
	}
	return f, nil
}

// Keys implements KeySource.
func (f *JWKSFile) Keys(ctx context.Context, refresh bool) (*jose.JSONWebKeySet, error) {
	return f.c.keys(ctx, refresh)
}

// JWKSURL fetches the JWKS over HTTP(S): on first use, every Refresh, and
// when a token names an unknown key, at most every MinInterval. An
// identity provider that is down leaves the last good keys in use; before
// the first success, JWTs are refused.
type JWKSURL struct{ c cachedKeys }

// JWKSURLOptions tunes NewJWKSURL. Zero fields take the defaults.
type JWKSURLOptions struct {
	Client      *http.Client
	Refresh     time.Duration
	MinInterval time.Duration
}

// NewJWKSURL builds the source; it fetches nothing yet.
func NewJWKSURL(url string, o JWKSURLOptions) *JWKSURL {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Refresh <= 0 {
		o.Refresh = DefaultJWKSRefresh
	}
	if o.MinInterval <= 0 {
		o.MinInterval = DefaultJWKSMinInterval
	}
	return &JWKSURL{c: cachedKeys{minGap: o.MinInterval, maxAge: o.Refresh, load: func(ctx context.Context) (*jose.JSONWebKeySet, error) {
		return fetchJWKS(ctx, o.Client, url)
	}}}
}

// Keys implements KeySource.
func (u *JWKSURL) Keys(ctx context.Context, refresh bool) (*jose.JSONWebKeySet, error) {
	return u.c.keys(ctx, refresh)
}

func fetchJWKS(ctx context.Context, client *http.Client, url string) (*jose.JSONWebKeySet, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks url: status %d", res.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	if len(b) > maxJWKSBytes {
		return nil, errors.New("jwks url: document over 1 MiB")
	}
	return ParseJWKS(b)
}

// Interface guards.
var (
	_ KeySource = (*JWKSFile)(nil)
	_ KeySource = (*JWKSURL)(nil)
)
