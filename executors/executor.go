// Package executors defines the contract every execution backend implements.
//
// The contract is deliberately small (Nomad's driver lesson, without Nomad's
// RPC-driven size): a kind, an availability probe, the capabilities it can
// enforce and a blocking Execute. What
// only some backends can do lives in optional interfaces detected by type
// assertion, so the manager never needs to know which backend it talks to.
//
// Backends never import manager or api: they receive a fully decided Spec and
// return a Result. Deciding whether code may run is not their job.
package executors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/executors/output"
)

// Kind names a backend. The values are the ones the policy's decision
// document uses in its "executor" field.
type Kind string

// The backends DESIGN.md §6 defines.
const (
	KindSubprocess Kind = "subprocess"
	KindDocker     Kind = "docker"
	KindAIO        Kind = "aio"
	// KindGVisor is the docker executor's container path under gVisor's
	// runsc runtime (executors/gvisor): a user-space kernel between the
	// code and the host's.
	KindGVisor Kind = "gvisor"
)

// Languages a Spec may carry. They match the API's "language" field.
const (
	LangPython     = "python"
	LangBash       = "bash"
	LangJavaScript = "javascript"
)

// ErrUnavailable is wrapped by every error that means "this backend cannot
// run work right now" (engine down, interpreter missing, pool exhausted). The
// manager maps it to 503 executor_unavailable and never falls back to a
// weaker backend.
var ErrUnavailable = errors.New("executor unavailable")

// UnavailableError carries the reason a backend is unavailable. The reason is
// meant for operators (logs, /readyz); the API only ever shows the stable code.
type UnavailableError struct {
	Kind   Kind
	Reason string
	Err    error
}

func (e *UnavailableError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s unavailable: %s: %v", e.Kind, e.Reason, e.Err)
	}
	return fmt.Sprintf("%s unavailable: %s", e.Kind, e.Reason)
}

// Is makes errors.Is(err, ErrUnavailable) hold for every UnavailableError.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

func (e *UnavailableError) Unwrap() error { return e.Err }

// Limits are the resource limits in force for one run. Zero means "use the
// backend's configured default", never "unlimited": every backend must apply
// a finite default for each field.
type Limits struct {
	// MemoryMB caps the address space (subprocess) or cgroup memory (docker).
	MemoryMB int
	// CPUSeconds caps CPU time (subprocess rlimit) or is turned into a CPU
	// quota (docker).
	CPUSeconds int
	// MaxProcs caps the number of processes (rlimit NPROC or pids cgroup).
	MaxProcs int
	// MaxOpenFiles caps file descriptors.
	MaxOpenFiles int
	// MaxFileSizeMB caps the size of any single file the code writes.
	MaxFileSizeMB int
	// MaxOutputBytes caps stdout and stderr each in the response.
	MaxOutputBytes int
	// MaxSpillBytes caps the full output kept in the workspace when the
	// response had to be truncated.
	MaxSpillBytes int
}

// Or returns l with every non-positive field taken from def: the one rule
// for "zero means the configured default" that every backend applies when
// merging a Spec's limits over its own.
func (l Limits) Or(def Limits) Limits {
	pick := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	return Limits{
		MemoryMB:       pick(l.MemoryMB, def.MemoryMB),
		CPUSeconds:     pick(l.CPUSeconds, def.CPUSeconds),
		MaxProcs:       pick(l.MaxProcs, def.MaxProcs),
		MaxOpenFiles:   pick(l.MaxOpenFiles, def.MaxOpenFiles),
		MaxFileSizeMB:  pick(l.MaxFileSizeMB, def.MaxFileSizeMB),
		MaxOutputBytes: pick(l.MaxOutputBytes, def.MaxOutputBytes),
		MaxSpillBytes:  pick(l.MaxSpillBytes, def.MaxSpillBytes),
	}
}

// Spec is one decided unit of work.
type Spec struct {
	// RequestID names the spill file for output beyond the response cap.
	RequestID string
	// SessionID is used for labels and logs only; isolation comes from
	// WorkspaceDir.
	SessionID string
	// Language is one of the Lang* constants.
	Language string
	// Code is the program text (for bash, the script).
	Code string
	// Timeout is the hard wall-clock limit. At the limit the whole process
	// tree is killed and the result has ExitCode 124 and TimedOut set.
	Timeout time.Duration
	// WorkspaceDir is the host directory of the session's workspace. Code sees
	// it as /workspace (or, for the subprocess backend, as its cwd with the
	// host path masked in output).
	WorkspaceDir string
	// UID and GID are the identity the code runs as, and the owner of
	// WorkspaceDir. The workspace package gives every session its own uid,
	// so concurrent sessions neither share a process budget (RLIMIT_NPROC
	// counts per uid) nor can reach each other's files. Zero means the
	// backend's configured default; a backend never runs code as uid 0.
	UID int
	GID int
	// Network is the policy obligation. Backends that cannot honour it
	// must refuse to run with an error wrapping ErrCapabilityMissing
	// (Capabilities.Check).
	Network bool
	// Egress is set by the manager exactly when Network is true: the
	// run's way to the gateway's egress proxy. A backend with the
	// network_grant capability bridges 127.0.0.1:EgressPort inside the
	// sandbox to it and gives the run the proxy variables; the sandbox
	// still has no interface but lo.
	Egress Egress
	Limits Limits
	// Output, when set, receives the run's output while it runs: each
	// chunk the response keeps (masked, within the caps), in order, with
	// its sequence number. It is the backend's output.Collector Tap (for
	// aio, sandboxd's Tap relayed over the wire), so the streamed bytes
	// are the Result's bytes, capped and spilled exactly as without it.
	//
	// It is called under the collector's lock and must not block: a
	// caller that writes the chunks to a client queues them
	// (output.Queue) and writes from elsewhere, so a slow client slows its
	// own stream, never the program. Data is only valid during the call.
	// The Result stays the whole answer: a backend that cannot stream (an
	// AIO server other than sandboxd) never calls Output, and a warm
	// start that falls back to a cold one may repeat an interpreter's
	// start-up warning, with sequence numbers from 1 again.
	Output func(output.Chunk)
	// Layout is the session's path layout (layout.go): where the
	// workspace also appears and the run's cwd and HOME. The zero value is
	// /workspace alone. A backend keeps it for the session's warm state
	// (interpreters, containers, instances): the manager gives one session
	// one layout, its front end's.
	Layout Layout
	// Stateful runs Code as a cell in the session's kernel (DESIGN.md
	// §11): a python run only, on a backend whose capabilities include
	// kernels, with a SessionID. Variables, imports and functions persist
	// from one cell to the next; Timeout interrupts the cell and keeps
	// the kernel; the memory and process limits bound the kernel over
	// its whole life, not one cell.
	Stateful bool
	// Release is set only for a Stager's run (the manager's write-ahead
	// audit record, still being committed): the backend prepares the run
	// as far as it can without running any of it, then calls Release, and
	// lets the run's code start only when it returns nil. On an error the
	// run is discarded, never started, and Execute returns an error
	// wrapping it. A nil Release lets the run start at once.
	Release func(ctx context.Context) error
}

// Stager is implemented by a backend that can stage a run up to its first
// instruction and hold it there until Spec.Release says go, so that the
// manager may commit the run's write-ahead audit record while the sandbox
// gets the run ready, instead of before. Stages reports whether spec's run
// can be held so; for any other the manager commits first, as for a
// backend that is no Stager.
type Stager interface {
	Stages(spec Spec) bool
}

// Result is what a finished run produced. A program that fails or times out
// is a Result, not an error: errors mean the backend could not run it.
type Result struct {
	Stdout   string
	Stderr   string
	ExitCode int
	// TimedOut is set when the run hit Spec.Timeout; ExitCode is then 124.
	TimedOut bool
	// Truncated is set when stdout or stderr was cut at MaxOutputBytes.
	Truncated bool
	// OutputPath, when set, is the workspace path (always starting with
	// /workspace/) of a file holding the full output, written because the
	// response was truncated.
	OutputPath string
	// OOMKilled is set when the backend knows the memory limit killed the run.
	OOMKilled bool
	Duration  time.Duration
	// Cell is a stateful run's part, nil for any other run. A pointer
	// keeps Result comparable.
	Cell *CellResult
}

// ExitCodeTimeout is the exit code of a run killed at its timeout, as
// coreutils timeout(1) reports it.
const ExitCodeTimeout = 124

// Executor is the contract of a backend.
type Executor interface {
	// Kind names the backend.
	Kind() Kind
	// Available returns nil when the backend can run work now, or an error
	// wrapping ErrUnavailable that says why not. It must be cheap enough to
	// call from /readyz and before each decision.
	Available(ctx context.Context) error
	// Capabilities reports what the backend can enforce in its current
	// mode (see Capabilities). It must be cheap and must not block: the
	// manager reads it with every availability probe, and the policy
	// decides on it.
	Capabilities() Capabilities
	// Execute runs spec to completion. ctx carries the request's deadline and
	// cancellation: when ctx is done the whole process tree (or container) is
	// killed before Execute returns.
	Execute(ctx context.Context, spec Spec) (Result, error)
}

// Closer is implemented by backends that hold resources (containers, warm
// pools, helper processes) which must be released on shutdown.
type Closer interface {
	Close(ctx context.Context) error
}

// SessionReleaser is implemented by backends that keep per-session state
// (warm containers, pool instances). The manager calls it when a session is
// deleted.
type SessionReleaser interface {
	ReleaseSession(ctx context.Context, sessionID string) error
}
