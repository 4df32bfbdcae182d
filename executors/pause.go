package executors

import "context"

// What a backend keeps of a session it pauses (Capabilities.Snapshot):
// its processes' memory and its files (gVisor's checkpoint of the
// session's kernel), its files only (the workspace, which outlives every
// container; processes start again and a stateful run says
// kernel_restarted), or nothing it vouches for.
const (
	SnapshotMemory     = "memory"
	SnapshotFilesystem = "filesystem"
	SnapshotNone       = "none"
)

// Paused is what a SessionPauser kept of one session.
type Paused struct {
	// Memory: the session's kernel was checkpointed with its variables
	// and comes back as it was on ResumeSession.
	Memory bool
	// Bytes is the size of what was written (the checkpoint image).
	Bytes int64
}

// SessionPauser is implemented by backends that can free what they hold
// for a session and bring it back later (POST /v1/sessions/{id}/pause,
// issue 30). PauseSession frees every container and process the backend
// holds for the session; what it keeps is in Paused. ResumeSession
// brings back what PauseSession kept and reports whether it restored a
// kernel's memory; without a checkpoint it does nothing (false). Both
// are safe for a session the backend never served.
type SessionPauser interface {
	PauseSession(ctx context.Context, sessionID string) (Paused, error)
	ResumeSession(ctx context.Context, sessionID string) (restored bool, err error)
	// DropPaused deletes what PauseSession kept (the session is deleted
	// or expired while paused).
	DropPaused(ctx context.Context, sessionID string)
}

// ForkChild is one child of a fork: its session and its workspace,
// already a copy of the parent's.
type ForkChild struct {
	SessionID    string
	WorkspaceDir string
}

// Forked is what a SessionForker carried into the children.
type Forked struct {
	// Memory: each child's kernel is a restore of the parent's, with its
	// variables, its random generators reseeded.
	Memory bool
	// Snapshot names the checkpoint the children were restored from.
	Snapshot string
}

// SessionForker is implemented by backends that can start a session's
// children from its live state (POST /v1/sessions/{id}/fork). The parent
// keeps running.
type SessionForker interface {
	ForkSession(ctx context.Context, parent string, children []ForkChild) (Forked, error)
}
