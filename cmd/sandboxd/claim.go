package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// A sandboxd started with --await-key serves before it has a key: it is a
// pool's idle sandbox, started ahead of its session so that a claim costs
// one request instead of a process start (executors/k8s's warm pool).
// Until POST /v1/claim names the key, every other request is refused as
// unauthorized. The claim is taken once: a second claim with another key
// is refused (409), the same key again is a no-op (a claimant retrying
// after a lost answer). Who can reach sandboxd before its claim can claim
// it; the pool's sandboxd listens on the pod's loopback, which only the
// pod's own processes (none but sandboxd's before the claim) and the
// apiserver's port-forward reach, and the claimant wins the pod through
// the apiserver first.

// presentedKey is the request's X-AIO-API-Key or Authorization: Bearer.
func presentedKey(r *http.Request) string {
	key := r.Header.Get("X-AIO-API-Key")
	if key == "" {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			key = strings.TrimSpace(v)
		}
	}
	return key
}

// handleClaim sets the API key of a sandboxd that awaits one.
func (s *server) handleClaim(w http.ResponseWriter, r *http.Request) {
	key := presentedKey(r)
	if len(key) < 16 {
		writeFail(w, http.StatusBadRequest, "a claim carries the new API key (at least 16 characters) as X-AIO-API-Key", nil)
		return
	}
	h := sha256.Sum256([]byte(key))
	if s.keyHash.CompareAndSwap(nil, &h) {
		s.cfg.Log.Info("sandboxd claimed")
		writeOK(w, nil)
		return
	}
	if cur := s.keyHash.Load(); subtle.ConstantTimeCompare(h[:], cur[:]) == 1 {
		writeOK(w, nil)
		return
	}
	writeFail(w, http.StatusConflict, "this sandbox is already claimed", nil)
}
