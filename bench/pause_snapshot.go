package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Named snapshots in the pause scenario (issue 30): a snapshot of the
// session holding pandas (a compressed --leave-running checkpoint and a
// copy of its workspace) and a new session started from it, to its
// first answer. A pause's kernel image is never compressed; a
// snapshot's is when the gateway's sessions.snapshot_compress says so
// (the report names which), so runs with it on and off say what
// compression saves and costs.

const (
	pauseSnapLabel = "named snapshot (the session goes on)"
	pauseFromLabel = "new session from a named snapshot to first answer"
)

// snapshotRound takes snapshot number i of session, starts a session
// from it and runs a cell there, timing both, then deletes both. It
// returns the snapshot's kernel image bytes.
func snapshotRound(ctx context.Context, g *gatewayProc, session string, i int,
	cell func(ctx context.Context, session, code, want string) error) (dSnap, dFrom time.Duration, image int64, compressed bool, err error) {
	s := time.Now()
	raw, err := g.do(ctx, "POST", "/v1/sessions/"+session+"/snapshots", "application/json",
		fmt.Appendf(nil, `{"name": "bench-%d"}`, i))
	if err != nil {
		return 0, 0, 0, false, fmt.Errorf("snapshot: %w", err)
	}
	dSnap = time.Since(s)
	var snap struct {
		ID          string `json:"id"`
		Memory      bool   `json:"memory"`
		MemoryBytes int64  `json:"memory_bytes"`
		Compressed  bool   `json:"compressed"`
	}
	if err := json.Unmarshal(raw, &snap); err != nil || !snap.Memory {
		return 0, 0, 0, false, fmt.Errorf("snapshot: %v: %.300s", err, raw)
	}
	defer func() { _, _ = g.do(ctx, "DELETE", "/v1/snapshots/"+snap.ID, "", nil) }()
	child := fmt.Sprintf("%s-from-%d", session, i)
	s = time.Now()
	if _, err := g.do(ctx, "POST", "/v1/sessions", "application/json",
		fmt.Appendf(nil, `{"id": %q, "from_snapshot": %q}`, child, snap.ID)); err != nil {
		return 0, 0, 0, false, fmt.Errorf("from_snapshot: %w", err)
	}
	if err := cell(ctx, child, pauseRead, pauseWant); err != nil {
		return 0, 0, 0, false, fmt.Errorf("from_snapshot cell: %w", err)
	}
	dFrom = time.Since(s)
	_ = g.deleteSession(ctx, child)
	return dSnap, dFrom, snap.MemoryBytes, snap.Compressed, nil
}

// pausedImageBytes is the size of the paused sessions' kernel images
// (uncompressed) in the gateway's data directory.
func pausedImageBytes(g *gatewayProc) int64 {
	files, _ := filepath.Glob(filepath.Join(g.dir, "data", "snapshots", "gvisor-*", "*", "*", "image", "*"))
	var n int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
			n += st.Size()
		}
	}
	return n
}
