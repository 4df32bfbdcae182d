package aio

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/sandgate/sandgate/executors"
)

// Instances that take their identity at the claim (issue 34). Binding an
// instance started ahead used to start sandboxd with `docker exec` as the
// session's uid and wait for it to listen: about 65 ms of a session's
// first output. Now, in none mode under a root gateway, the instance's
// main process is `sandboxd serve --await-claim`, started with the
// container as root with CAP_SETUID, CAP_SETGID and CAP_SETPCAP alone,
// listening on its socket. The bind (after mounting the workspace, as
// before) is one request: POST /v1/claim with the instance's key and the
// session's uid, gid and home; sandboxd answers, drops to that identity
// (no capability left in any set, the gid its only group) and execs
// itself as the session's sandboxd on the same socket
// (cmd/sandboxd/claimas.go). What the session's code finds is what the
// exec gave: sandboxd as its uid, the same flags, environment and working
// directory. sandboxd's socket directory stays root's (0700) throughout,
// so no code in the sandbox can reach it or swap the socket.
//
// A container made by an earlier gateway (no labelClaim) is bound as
// before. In direct mode (a gateway that is not root) and bridge mode
// nothing changes.

// claimAsConfig makes cfg's main process sandboxd awaiting its claim.
func claimAsConfig(cfg *container.Config, hc *container.HostConfig) {
	cfg.User = "0:0"
	cfg.Cmd = []string{"serve", "--await-claim", "--contained", "--workspace", workspaceMount,
		"--listen", "unix:" + containerRun + "/" + socketName,
		"--egress", "unix:" + executors.EgressDir + "/" + executors.EgressSocketName}
	hc.CapAdd = []string{"SETUID", "SETGID", "SETPCAP"}
}

// claimAs claims h's sandboxd for ws's identity, retrying while sandboxd
// is not listening yet (an instance created for this session), and
// returns the claimed sandboxd's client once it answers.
func claimAs(ctx context.Context, h *handle, ws Workspace) (*Client, error) {
	sock := filepath.Join(h.dir, stateRun, socketName)
	c := NewUnixClient(sock, h.key)
	id := ClaimIdentity{UID: ws.UID, GID: ws.GID, Home: ws.Home}
	err := poll(ctx, time.Millisecond, func() (bool, error) {
		err := c.ClaimAs(ctx, id)
		var ae *APIError
		return !errors.As(err, &ae) || ae.Status == http.StatusServiceUnavailable, err
	})
	switch {
	case err != nil && ctx.Err() != nil:
		c.Close()
		return nil, unavailable("sandboxd did not take its claim", err)
	case err != nil:
		c.Close()
		return nil, unavailable("sandboxd refused its claim", err)
	}
	// The claimed sandboxd serves the key: a cheap authenticated call
	// (GET /v1/sandbox would wait for its interpreter probe, ~20 ms).
	if err := c.call(ctx, http.MethodGet, "/v1/bash/sessions", nil, nil); err != nil {
		c.Close()
		return nil, unavailable("sandboxd did not serve after its claim", err)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
		c.Close()
		return nil, unavailable("sandboxd socket replaced during start-up", err)
	}
	return c, nil
}
