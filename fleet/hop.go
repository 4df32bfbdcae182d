package fleet

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// How a replica trusts a forwarder. A forwarded request keeps the client's
// own Authorization header, and the owner authenticates it again with its
// own configuration (every replica of a fleet has the same tokens and JWT
// settings): the caller's identity is never asserted by the forwarder, so
// a compromised or misconfigured replica cannot act as anyone it holds no
// credential of.
//
// What the owner does take from the forwarder travels in HopHeader, signed
// with HMAC-SHA256 under the fleet's forwarding key (a random key the
// first replica stores in the database; whoever can read it already holds
// the database): the forwarder's name, the time, the request id (so one
// id names the request in both replicas' logs and audit), and the hash of
// the credential and of the method and URI it was signed for. A valid hop
// tells the owner not to forward again (one hop at most, never a loop). A
// hop that fails verification is ignored (the request is treated as a
// client's own), so a client forging one gains nothing.

// HopHeader carries the signed hop.
const HopHeader = "X-Sandgate-Fleet-Hop"

// hopMaxAge bounds a hop's age (clock skew included): a captured hop
// cannot be replayed later.
const hopMaxAge = 30 * time.Second

// Hop is a verified forwarding hop.
type Hop struct {
	From      string
	RequestID string
}

func newKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// forwardKey reads the fleet's forwarding key, creating it on first use.
func (r *Registry) forwardKey(ctx context.Context) ([]byte, error) {
	if _, err := r.db.DB().ExecContext(ctx, `INSERT INTO markers (name, token) VALUES ('forward-key', $1) ON CONFLICT (name) DO NOTHING`, newKey()); err != nil {
		return nil, fmt.Errorf("fleet: create the forwarding key: %w", err)
	}
	var tok string
	if err := r.db.DB().QueryRowContext(ctx, `SELECT token FROM markers WHERE name = 'forward-key'`).Scan(&tok); err != nil {
		return nil, fmt.Errorf("fleet: read the forwarding key: %w", err)
	}
	return hex.DecodeString(tok)
}

func hopMAC(key []byte, r *http.Request, from, ts, reqID string) string {
	cred := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	m := hmac.New(sha256.New, key)
	for _, part := range []string{from, ts, reqID, r.Method, r.URL.RequestURI(), hex.EncodeToString(cred[:])} {
		m.Write([]byte(part))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

// signHop sets out's HopHeader (out is the outgoing request, its URL the
// owner's).
func signHop(key []byte, out *http.Request, from, reqID string, now time.Time) {
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	out.Header.Set(HopHeader, strings.Join([]string{from, ts, reqID, hopMAC(key, out, from, ts, reqID)}, ";"))
}

// verifyHop checks r's HopHeader.
func verifyHop(key []byte, r *http.Request, now time.Time) (Hop, bool) {
	parts := strings.Split(r.Header.Get(HopHeader), ";")
	if len(parts) != 4 {
		return Hop{}, false
	}
	from, ts, reqID, mac := parts[0], parts[1], parts[2], parts[3]
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Hop{}, false
	}
	if age := now.Sub(time.UnixMilli(ms)); age > hopMaxAge || age < -hopMaxAge {
		return Hop{}, false
	}
	if !hmac.Equal([]byte(mac), []byte(hopMAC(key, r, from, ts, reqID))) {
		return Hop{}, false
	}
	return Hop{From: from, RequestID: reqID}, true
}
