package executors

import "context"

// SnapshotOptions tune how a named snapshot's kernel image is written.
type SnapshotOptions struct {
	// Compress writes the image compressed (gVisor: flate at its best
	// speed, about a quarter of the size for a pandas kernel, for several
	// times the time to write and to restore it; sessions.snapshot_compress
	// in the gateway's configuration). A pause never compresses.
	Compress bool
}

// SessionSnapshotter is implemented by backends that can keep a
// session's live state in a named snapshot (POST
// /v1/sessions/{id}/snapshots) and start new sessions from it (POST
// /v1/sessions {from_snapshot}). The session keeps running. dir is the
// backend's own directory inside the snapshot, on storage every replica
// of a fleet reaches; the backend writes everything it needs to restore
// there, so that any replica can restore it.
type SessionSnapshotter interface {
	// SaveSnapshot writes the session's kernel, when it has one and the
	// backend keeps memory, into dir. Memory false: nothing was kept
	// beyond the workspace, which the manager copies.
	SaveSnapshot(ctx context.Context, sessionID, dir string, o SnapshotOptions) (Paused, error)
	// RestoreSnapshot makes the kernel saved in dir child's kernel, its
	// random generators reseeded. false when dir holds no kernel.
	RestoreSnapshot(ctx context.Context, dir string, child ForkChild) (bool, error)
}
