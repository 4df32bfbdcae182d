package manager

import (
	"context"

	"errors"
	"github.com/sandgate/sandgate/audit"
	"io"
	"io/fs"
)

// ActivitySink is told what a session's runs printed and what the files
// API did to its files, for the approval page's timeline
// (confirm.Activity keeps short, redacted excerpts and diffs of them in
// memory). The audit log keeps neither; nil: nothing is told.
type ActivitySink interface {
	RunFinished(tenant, sessionID, requestID, stdout, stderr string, truncated bool)
	// FileChanged gets the file's contents before (nil when it did not
	// exist: existed false) and after, each read up to maxDiffRead bytes.
	FileChanged(tenant, sessionID, requestID, path string, before, after []byte, existed bool)
}

// maxDiffRead bounds what is read of a file for the sink: one byte past
// confirm.MaxDiffInput, so that the sink can tell "too large".
const maxDiffRead = 64<<10 + 1

// runFinished tells the sink what a run that ran printed.
func (m *Manager) runFinished(rec *audit.Record, res *RunResult, err error) {
	if m.deps.Activity == nil || res == nil || err != nil {
		return
	}
	m.deps.Activity.RunFinished(rec.Tenant, rec.SessionID, rec.RequestID, res.Result.Stdout, res.Result.Stderr, res.Result.Truncated)
}

// fileChanged tells the sink what a write or an edit did to the file,
// given its contents before (snapshotFile).
func (m *Manager) fileChanged(ctx context.Context, rec *audit.Record, key, path string, before []byte, existed bool) {
	if m.deps.Activity == nil {
		return
	}
	after, _ := m.snapshotFile(ctx, key, path)
	m.deps.Activity.FileChanged(rec.Tenant, rec.SessionID, rec.RequestID, rec.Path, before, after, existed)
}

// snapshotFile is up to maxDiffRead bytes of a session's file, and whether
// it exists; any other failure reads as "not there" (the diff is context
// for a person, never a reason to fail the write).
func (m *Manager) snapshotFile(ctx context.Context, key, path string) ([]byte, bool) {
	if m.deps.Activity == nil {
		return nil, false
	}
	f, err := m.deps.Workspaces.OpenRaw(ctx, key, path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			m.log.DebugContext(ctx, "file not read for its diff", "err", err)
		}
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDiffRead))
	if err != nil {
		return nil, false
	}
	return b, true
}
