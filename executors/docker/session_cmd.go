package docker

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors/output"
)

// sandboxCmd is one command started in a session sandbox, whichever way
// it was started: an exec (execCommand) or the sandbox's process server
// (spawnCommand, procserver.go). Both give the command the same
// identity, environment, working directory and streams.
type sandboxCmd struct {
	// copyOut copies the command's stdout and stderr until both end.
	copyOut func(stdout, stderr io.Writer) error
	stdin   io.Writer
	// closeIn closes the command's stdin.
	closeIn func() error
	// stop makes a blocked copyOut return.
	stop func()
	// exit is the command's exit code once it has ended.
	exit  func() (int, error)
	close func()
}

// startInSandbox starts argv in sb as its shape's uid, with env on top
// of the sandbox's, in the shape's working directory.
func (e *Executor) startInSandbox(ctx context.Context, sb *sessionBox, env, argv []string) (sandboxCmd, error) {
	if sb.b.procSock != "" {
		return e.spawnCommand(ctx, sb, env, argv)
	}
	return e.execCommand(ctx, sb, env, argv)
}

// spawnCommand starts argv through sb's process server.
func (e *Executor) spawnCommand(ctx context.Context, sb *sessionBox, env, argv []string) (sandboxCmd, error) {
	sh := sb.sh
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.EngineTimeout)
	defer cancel()
	p, err := spawn(opCtx, sb.b.procSock, spawnRequest{UID: sh.uid, GID: sh.gid, Cwd: sh.layout.Dir(), Env: env, Argv: argv})
	if err != nil {
		return sandboxCmd{}, e.unavailable("start a command in the session sandbox", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = p.stdout.Close()
			_ = p.stderr.Close()
		})
	}
	return sandboxCmd{
		copyOut: func(stdout, stderr io.Writer) error {
			errc := make(chan error, 1)
			go func() {
				_, err := output.Copy(stderr, p.stderr)
				errc <- err
			}()
			_, err := output.Copy(stdout, p.stdout)
			return errors.Join(err, <-errc)
		},
		stdin:   p.stdin,
		closeIn: p.stdin.Close,
		stop:    stop,
		exit:    p.wait,
		close:   func() { stop(); p.close() },
	}, nil
}

// execCommand starts argv as an exec in sb (a sandbox without a process
// server: gVisor's, or one made by a gateway that is not root).
func (e *Executor) execCommand(ctx context.Context, sb *sessionBox, env, argv []string) (sandboxCmd, error) {
	sh := sb.sh
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.EngineTimeout)
	defer cancel()
	created, err := e.cli.ExecCreate(opCtx, sb.b.id, client.ExecCreateOptions{
		User:        strconv.Itoa(sh.uid) + ":" + strconv.Itoa(sh.gid),
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Env:        env,
		WorkingDir: sh.layout.Dir(),
		Cmd:        argv,
	})
	if err != nil {
		return sandboxCmd{}, e.engineError(ctx, "exec create", err)
	}
	att, err := e.cli.ExecAttach(opCtx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return sandboxCmd{}, e.engineError(ctx, "exec start", err)
	}
	conn := att.HijackedResponse
	return sandboxCmd{
		copyOut: func(stdout, stderr io.Writer) error {
			_, err := stdcopy.StdCopy(stdout, stderr, conn.Reader)
			return err
		},
		stdin:   conn.Conn,
		closeIn: conn.CloseWrite,
		stop:    conn.Close,
		exit:    func() (int, error) { return e.execExitCode(created.ID) },
		close:   conn.Close,
	}, nil
}
