package aio

import (
	"context"
	"net/http"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
)

// Claim calls POST /v1/claim with the client's key: a sandboxd started
// with --await-key (a pool's idle sandbox) takes it as its API key, once.
// Claiming again with the same key succeeds; a sandboxd claimed with
// another key answers an APIError with status 409, and a key shorter
// than 16 characters one with status 400.
func (c *Client) Claim(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/claim", nil, nil)
}

// WorkspaceFingerprint calls GET /v1/workspace/fingerprint: a hash of the
// sandbox's workspace tree, equal to aiowire.EmptyFingerprint for an
// empty one.
func (c *Client) WorkspaceFingerprint(ctx context.Context) (aiowire.Fingerprint, error) {
	var fp aiowire.Fingerprint
	err := c.call(ctx, http.MethodGet, "/v1/workspace/fingerprint", nil, &fp)
	return fp, err
}

// ClaimIdentity is the identity a sandboxd started with --await-claim
// takes at its claim (cmd/sandboxd/claimas.go).
type ClaimIdentity struct {
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Home string `json:"home,omitempty"`
}

// ClaimAs calls POST /v1/claim with the client's key and id: a sandboxd
// started with --await-claim answers, then serves on the same socket as
// id with that key. A uid or gid of 0, or a short key, is answered 400.
func (c *Client) ClaimAs(ctx context.Context, id ClaimIdentity) error {
	return c.call(ctx, http.MethodPost, "/v1/claim", id, nil)
}
