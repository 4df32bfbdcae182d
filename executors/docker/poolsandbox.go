package docker

import (
	"context"
	"sync"
	"time"

	"github.com/moby/moby/client"
)

// Pooled session sandboxes. A session sandbox (session.go) is a container
// created for the session on its first command: a create and a start on
// the path of the first output of every E2B sandbox. Under runc the pool
// keeps them ready too, as a shape of its own (shape.sandbox), made on the
// first sandbox a shape asks for and sized by demand like any other.
//
// A session sandbox needs nothing of its session but its workspace: its
// only process of its own is the process server (procserver.go), which
// starts every command as the uid the command's request names. So a
// pooled one is the same container, created with the slot's workspace in
// place of the session's, and the claim is the workspace's mount: no boot
// step, no identity handed over, nothing a command could tell from a
// sandbox created for it.
//
// Under gVisor the host's mount does not reach into a running sandbox
// (the pool's runs bind it from inside, which needs a capability the
// sandbox's execs would then inherit): session sandboxes are created
// there as before.

// sandboxUser is who a session sandbox's placeholder runs as: nobody, so
// that no command of the session can kill it (or count it against the
// session's processes).
const sandboxUser = nobody

// sandboxCommand makes o a session sandbox's container: the placeholder
// and nothing on stdin.
func sandboxCommand(o *client.ContainerCreateOptions) {
	o.Config.Entrypoint = []string{"sleep", "infinity"}
	o.Config.Cmd = nil
	o.Config.User = sandboxUser
	o.Config.WorkingDir = "/"
	o.Config.StdinOnce = false
	o.Config.OpenStdin = false
	o.Config.AttachStdin = false
}

// claimSandbox hands the session a pooled sandbox of shape sh with the
// session's workspace mounted, or nil when none is ready or the runtime
// has its own kernel (the caller creates one).
func (p *sandboxPool) claimSandbox(ctx context.Context, sh shape) *box {
	if p.e.cfg.OwnKernel {
		return nil
	}
	b := p.claim(ctx, sh)
	if b == nil {
		return nil
	}
	// Nothing travels over the container's own streams (closed already
	// under a process server).
	if b.conn.Conn != nil {
		b.conn.Close()
		b.conn = client.HijackedResponse{}
	}
	// A run's container is released at the run's end, when the pool
	// refills behind it; a sandbox is released with its session, hours
	// later. So the refill follows the sandbox's first command instead
	// (execInSandbox calls refill when it ends), or sandboxRefillBound
	// after the claim if that command runs on: a container start beside
	// the first command, on a small machine, delays its first output by
	// several milliseconds (issue 34).
	b.refill = sync.OnceFunc(p.kick)
	time.AfterFunc(sandboxRefillBound, b.refill)
	return b
}

// sandboxRefillBound is how long a claimed sandbox's refill waits at
// most for the sandbox's first command to end.
const sandboxRefillBound = 2 * time.Second
