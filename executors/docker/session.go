package docker

import (
	"context"
	"io"
	"log/slog"
	"sync"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
)

// Session sandboxes (executors.Layout.SessionSandbox, the
// session_sandbox capability): for a session whose front end expects one
// sandbox for the session's life (E2B's sandboxes; e2b.Layout is the only
// front end that asks today), every command runs in one long-lived
// container of the session instead of a container of its own. A process
// one command leaves running is seen by the next (ps, its loopback
// server), /tmp persists, and so does what pip or npm installed; the
// workspace is the same directory as always.
//
// The container is created like a run's (read-only root, every
// capability dropped, no-new-privileges, network none with a loopback of
// its own, the workspace and the layout's root, a size-capped /tmp, the
// run's cgroup limits), with docker-init as PID 1 (it reaps what commands
// orphan). Under runc its main process is the process server
// (procserver.go: root, with the identity-changing capabilities alone),
// which starts each command as the session's uid; under gVisor it is
// `sleep infinity` as nobody, and each command is an exec as the
// session's uid (session_cmd.go). Either way no command of the session can
// kill the sandbox's own processes, and the command's fixed script reads
// the program from stdin, as a run's boot script does.
//
// What holds, per command:
//   - risk, policy, approval and audit: unchanged, the manager's, before
//     the executor is called;
//   - the timeout and a cancelled request: the command's whole tree is
//     killed (sessionKillScript): every process carrying the run's marker
//     variable, their descendants, and every process that appeared during
//     the run and belongs to no other run, setsid'd and double-forked ones
//     included; a command that ends by itself leaves what it started
//     running, which is the point;
//   - output caps and the spill file: the same collector as a run's;
//   - memory and process limits: the container's cgroup (and, under
//     gVisor, RLIMIT_NPROC in its kernel), so they bound the session's
//     sandbox as a whole, every command and background process together,
//     as E2B's own sandbox limits do, not each command apart.
//
// A run whose shape differs from the sandbox's (other limits, a network
// grant) cannot run in it: a granted run gets a container of its own as
// before (the egress bridge is per run; it sees the workspace, not the
// sandbox's /tmp or processes), and different limits replace the sandbox
// (its processes and /tmp are lost, logged). A sandbox that died (its
// memory limit killed PID 1) is replaced on the next command likewise.
//
// Under runc a sandbox comes from the pool when one of its shape is
// ready (poolsandbox.go): the same container, started ahead with the
// pool's slot as its workspace, onto which the claim mounts the
// session's.
//
// The container is labelled like every other of the executor's
// (sandgate.session, sandgate.instance, ...; a pooled one has no session
// label, its labels being fixed before it had a session) plus
// sandgate.sandbox=true:
// it is removed when the session is released (deleted, expired, killed
// through E2B), at Close, and by the next start's orphan reaper after a
// crash.
const labelSandbox = labelPrefix + "sandbox"

// sessionBox is one session's long-lived container.
type sessionBox struct {
	b  *box
	sh shape
}

// sandboxes holds the session sandboxes by session.
type sandboxes struct {
	mu       sync.Mutex
	m        map[string]*sessionBox
	starting map[string]*sync.Mutex // serialises one session's creation
	closed   bool
}

func newSandboxes() *sandboxes {
	return &sandboxes{m: map[string]*sessionBox{}, starting: map[string]*sync.Mutex{}}
}

// containerOf is the id of session's sandbox container, "" for none.
func (s *sandboxes) containerOf(session string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.m[session]; sb != nil {
		return sb.b.id
	}
	return ""
}

// wantsSandbox reports whether spec runs in its session's sandbox.
func wantsSandbox(spec executors.Spec) bool {
	return spec.Layout.SessionSandbox && spec.SessionID != "" && !spec.Stateful && spec.Egress == nil
}

// sandbox returns the session's sandbox for shape sh, creating it (or
// replacing one that died or was made for another shape).
func (e *Executor) sandbox(ctx context.Context, session string, sh shape) (*sessionBox, error) {
	s := e.sandboxes
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, e.unavailable("executor closed", nil)
	}
	lock := s.starting[session]
	if lock == nil {
		lock = &sync.Mutex{}
		s.starting[session] = lock
	}
	s.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()

	s.mu.Lock()
	cur := s.m[session]
	if cur != nil && cur.sh == sh && !cur.b.exit.exited() {
		s.mu.Unlock()
		return cur, nil
	}
	delete(s.m, session)
	s.mu.Unlock()
	if cur != nil {
		e.log.Info("session sandbox replaced: its processes and /tmp are gone", "session_id", session,
			"exited", cur.b.exit.exited(), "shape_changed", cur.sh != sh)
		e.discard(cur.b)
	}
	b, err := e.launchSandbox(ctx, session, sh)
	if err != nil {
		return nil, err
	}
	sb := &sessionBox{b: b, sh: sh}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		e.discard(b)
		return nil, e.unavailable("executor closed", nil)
	}
	s.m[session] = sb
	return sb, nil
}

// launchSandbox claims a pooled sandbox for the session
// (poolsandbox.go) or creates and starts its sandbox container.
func (e *Executor) launchSandbox(ctx context.Context, session string, sh shape) (*box, error) {
	if b := e.pool.claimSandbox(ctx, sh); b != nil {
		return b, nil
	}
	labels := e.labels(session, "")
	delete(labels, labelWarm)
	labels[labelSandbox] = "true"
	if e.procServers() {
		return e.launchProcServer(ctx, sh, labels)
	}
	b, err := e.launch(ctx, sh, labels, sandboxCommand)
	if err != nil {
		return nil, err
	}
	// Nothing travels over the container's own streams: commands are
	// execs with streams of their own.
	b.conn.Close()
	b.conn = client.HijackedResponse{}
	return b, nil
}

// releaseSandbox removes the session's sandbox (ReleaseSession): its
// processes die with it.
func (e *Executor) releaseSandbox(session string) {
	s := e.sandboxes
	s.mu.Lock()
	sb := s.m[session]
	delete(s.m, session)
	delete(s.starting, session)
	s.mu.Unlock()
	if sb != nil {
		e.discard(sb.b)
	}
}

// closeSandboxes removes every session sandbox (Close).
func (e *Executor) closeSandboxes() {
	s := e.sandboxes
	s.mu.Lock()
	s.closed = true
	all := s.m
	s.m = map[string]*sessionBox{}
	s.mu.Unlock()
	for _, sb := range all {
		e.discard(sb.b)
	}
}

// sandboxShape is the shape of spec's session sandbox: a run's, with a
// network namespace of its own (the sandbox holds the session's
// loopback) and no egress.
func (e *Executor) sandboxShape(spec executors.Spec, dir string) shape {
	sh := newShape(e.cfg.Images[spec.Language], dir, spec.UID, spec.GID, spec.Limits, e.cfg.Runtime).withLayout(spec.Layout)
	sh.sandbox = true
	return sh
}

// executeInSandbox is Execute for a run in its session's sandbox.
func (e *Executor) executeInSandbox(ctx context.Context, spec executors.Spec, dir string) (executors.Result, error) {
	sb, err := e.sandbox(ctx, spec.SessionID, e.sandboxShape(spec, dir))
	if err != nil {
		return executors.Result{}, err
	}
	log := e.log.With("request_id", spec.RequestID, "session_id", spec.SessionID)
	res, err := e.execInSandbox(ctx, sb, sessionInput{runInput: runInput{
		lang: spec.Language, code: spec.Code, timeout: spec.Timeout, limits: spec.Limits,
		dir: dir, requestID: spec.RequestID, log: log, tap: spec.Output,
	}})
	log.DebugContext(ctx, "run finished in the session sandbox", "exit_code", res.ExitCode,
		"timed_out", res.TimedOut, "truncated", res.Truncated, "duration_ms", res.Duration.Milliseconds(), "err", errString(err))
	return res, err
}

// startDetachedInSandbox is StartDetached for a run in its session's
// sandbox: an exec like a blocking command's that outlives the request;
// Kill and the session's release kill its tree (sessionKillScript).
func (e *Executor) startDetachedInSandbox(ctx context.Context, spec executors.Spec, dir string, stdin bool) (executors.Detached, error) {
	sb, err := e.sandbox(ctx, spec.SessionID, e.sandboxShape(spec, dir))
	if err != nil {
		return nil, err
	}
	return e.goDetached(spec, stdin, func(life context.Context, in io.Reader, log *slog.Logger) (executors.Result, error) {
		return e.execInSandbox(life, sb, sessionInput{stdinMode: stdin, runInput: runInput{
			lang: spec.Language, code: spec.Code, timeout: spec.Timeout, limits: spec.Limits,
			dir: dir, requestID: spec.RequestID, log: log, tap: spec.Output, stdin: in,
		}})
	}, nil)
}
