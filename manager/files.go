package manager

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/workspace"
)

// File operation kinds, as audit records and metrics name them.
const (
	KindFileRead   = "file.read" // numbered read
	KindFileGet    = "file.get"  // raw download
	KindFileWrite  = "file.write"
	KindFileEdit   = "file.edit"
	KindFileList   = "file.list"
	KindFileGlob   = "file.glob"
	KindFileGrep   = "file.grep"
	KindFileDelete = "file.delete"
)

// FileRequest names the file an operation is about. Path is the client's,
// as sent; the workspace resolves and checks it.
//
// File operations do not go through the execution pipeline (no risk,
// policy or approval: nothing runs), but each writes one audit record with
// the shape of an execution's: kind, session, principal, the path as code
// sees it (/workspace/...), bytes, outcome, error code and duration. A path
// refused before it could be resolved is recorded escaped and cut to
// requestedPathMax bytes under Detail["requested_path"], for forensics.
type FileRequest struct {
	RequestID string
	Principal Principal
	SessionID string
	Path      string
}

// requestedPathMax bounds the refused path kept in an audit record.
const requestedPathMax = 256

// detailMax bounds other client strings kept in an audit record.
const detailMax = 256

// FileLimits are the workspace limits in force, for the HTTP layer (the
// body cap of a raw upload).
func (m *Manager) FileLimits() workspace.Options { return m.deps.Workspaces.Limits() }

// fileOp resolves the request's session for its caller, runs one file
// operation on the session's workspace (op gets the session's key) and
// records it.
func (m *Manager) fileOp(ctx context.Context, kind string, req FileRequest, op func(rec *audit.Record, key string) error) error {
	start := time.Now()
	rec := &audit.Record{
		RequestID: req.RequestID, Kind: kind, Tenant: req.Principal.Tenant, SessionID: req.SessionID,
		Principal: req.Principal.Role + ":" + req.Principal.Name,
	}
	setDetail(rec, "front_end", frontEndOf(ctx))
	if rel, err := workspace.ResolvePath(req.Path); err == nil {
		rec.Path = workspace.DisplayPath(rel)
	} else {
		setDetail(rec, "requested_path", strconv.QuoteToASCII(cut(req.Path, requestedPathMax)))
	}
	ref, err := m.ResolveSession(req.Principal, req.SessionID)
	if err == nil {
		rec.Tenant, rec.SessionID = ref.Tenant, ref.ID
		err = m.admitted(ctx, ref, fileAdmitOp(kind), func() error {
			if writesAhead(kind) {
				if err := m.writeAhead(ctx, rec, ""); err != nil {
					return err
				}
			}
			sess, owner, err := m.open(ctx, ref, OpenOptions{FrontEnd: frontEndOf(ctx), peek: kind != KindFileWrite && kind != KindFileEdit})
			if err == nil && !owner.Local {
				err = ErrSessionElsewhere
			}
			if err != nil {
				return err
			}
			if err := op(rec, ref.Key); err != nil {
				return err
			}
			sess.touch()
			return nil
		})
	}
	if code, _, _ := errcode.Of(err); code == errcode.Internal && ctx.Err() != nil {
		// The client went away (or the gateway is shutting down) mid-way.
		err = fmt.Errorf("%w: %w", ErrCancelled, err)
	}
	if werr := m.record(ctx, rec, fileOutcome(err), err, start); werr != nil && err == nil && rec.ID == 0 {
		// Fail closed: an answer that is not sent yet (a read, a listing,
		// a search) is not sent without its record. A write-ahead
		// operation already has its started record.
		err = fmt.Errorf("audit record: %w", werr)
	}
	return err
}

// writesAhead reports whether a file operation of kind gets a started
// record before it runs, like an execution: those that change the
// workspace, and the raw download, which streams the file to the client
// before its final record could refuse it. Without the started record a
// full audit disk would let them happen unrecorded (issue 21).
func writesAhead(kind string) bool {
	switch kind {
	case KindFileWrite, KindFileEdit, KindFileDelete, KindFileGet:
		return true
	}
	return false
}

// fileAdmitOp is what a file operation may do: an upload may create its
// session; everything else needs an existing one.
func fileAdmitOp(kind string) admitOp {
	if kind == KindFileWrite {
		return opCreate
	}
	return opRead
}

// fileOutcome classifies a file operation for the audit log: refused as
// invalid before anything was touched, denied as an escape, failed when
// the operation could not be done on the workspace as it is (no such
// file, no match, over quota...), or an internal error.
func fileOutcome(err error) string {
	if err == nil {
		return OutcomeOK
	}
	switch code, _, _ := errcode.Of(err); code {
	case errcode.InvalidRequest, errcode.PayloadTooLarge, errcode.FileTooLarge:
		return OutcomeInvalid
	case errcode.PathTraversal, errcode.Forbidden:
		return OutcomeDenied
	case errcode.Cancelled:
		return OutcomeCancelled
	case errcode.RateLimited, errcode.QuotaExceeded:
		return OutcomeLimited
	case errcode.Internal:
		return OutcomeError
	}
	return OutcomeFailed
}

func setDetail(rec *audit.Record, k, v string) {
	if rec.Detail == nil {
		rec.Detail = map[string]string{}
	}
	rec.Detail[k] = v
}

// cut returns at most n bytes of s.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ReadFile is the numbered read (deepagents' read_file).
func (m *Manager) ReadFile(ctx context.Context, req FileRequest, offset, limit int) (page workspace.TextPage, err error) {
	err = m.fileOp(ctx, KindFileRead, req, func(rec *audit.Record, key string) error {
		page, err = m.deps.Workspaces.ReadText(ctx, key, req.Path, offset, limit)
		rec.Bytes = int64(len(page.Content))
		return err
	})
	return page, err
}

// GetFile opens a file for raw download and hands it to send, which
// returns how many bytes it sent. The file is closed after send returns,
// and the record counts the bytes sent.
func (m *Manager) GetFile(ctx context.Context, req FileRequest, send func(*workspace.RawFile) (int64, error)) error {
	return m.fileOp(ctx, KindFileGet, req, func(rec *audit.Record, key string) error {
		rf, err := m.deps.Workspaces.OpenRaw(ctx, key, req.Path)
		if err != nil {
			return err
		}
		defer rf.Close()
		rec.Bytes, err = send(rf)
		return err
	})
}

// WriteFile stores body at the request's path.
func (m *Manager) WriteFile(ctx context.Context, req FileRequest, mode workspace.WriteMode, body io.Reader) (res workspace.WriteResult, err error) {
	err = m.fileOp(ctx, KindFileWrite, req, func(rec *audit.Record, key string) error {
		setDetail(rec, "mode", cut(string(mode), detailMax))
		before, existed := m.snapshotFile(ctx, key, req.Path)
		res, err = m.deps.Workspaces.Write(ctx, key, req.Path, mode, body)
		rec.Bytes = res.Written
		if err == nil {
			m.fileChanged(ctx, rec, key, req.Path, before, existed)
		}
		return err
	})
	return res, err
}

// EditFile replaces old with new in the request's file.
func (m *Manager) EditFile(ctx context.Context, req FileRequest, old, new string, replaceAll bool) (res workspace.EditResult, err error) {
	err = m.fileOp(ctx, KindFileEdit, req, func(rec *audit.Record, key string) error {
		before, existed := m.snapshotFile(ctx, key, req.Path)
		res, err = m.deps.Workspaces.Edit(ctx, key, req.Path, old, new, replaceAll)
		rec.Bytes = res.Size
		if err == nil {
			setDetail(rec, "occurrences", strconv.Itoa(res.Occurrences))
			m.fileChanged(ctx, rec, key, req.Path, before, existed)
		}
		return err
	})
	return res, err
}

// ListFiles lists the request's path down to depth levels.
func (m *Manager) ListFiles(ctx context.Context, req FileRequest, depth int) (l workspace.Listing, err error) {
	err = m.fileOp(ctx, KindFileList, req, func(rec *audit.Record, key string) error {
		l, err = m.deps.Workspaces.ListFiles(ctx, key, req.Path, depth)
		setDetail(rec, "entries", strconv.Itoa(len(l.Entries)))
		return err
	})
	return l, err
}

// GlobFiles lists the entries under the request's path matching pattern.
func (m *Manager) GlobFiles(ctx context.Context, req FileRequest, pattern string) (l workspace.Listing, err error) {
	err = m.fileOp(ctx, KindFileGlob, req, func(rec *audit.Record, key string) error {
		setDetail(rec, "pattern", strconv.QuoteToASCII(cut(pattern, detailMax)))
		l, err = m.deps.Workspaces.Glob(ctx, key, req.Path, pattern)
		setDetail(rec, "entries", strconv.Itoa(len(l.Entries)))
		return err
	})
	return l, err
}

// GrepFiles searches under the request's path. The pattern itself is not
// recorded (agents search for secrets too), only its size.
func (m *Manager) GrepFiles(ctx context.Context, req FileRequest, q workspace.GrepQuery) (res workspace.GrepResult, err error) {
	q.Path = req.Path
	err = m.fileOp(ctx, KindFileGrep, req, func(rec *audit.Record, key string) error {
		setDetail(rec, "pattern_bytes", strconv.Itoa(len(q.Pattern)))
		setDetail(rec, "literal", strconv.FormatBool(q.Literal))
		res, err = m.deps.Workspaces.Grep(ctx, key, q)
		rec.Bytes = res.BytesScanned
		setDetail(rec, "matches", strconv.Itoa(len(res.Matches)))
		return err
	})
	return res, err
}

// DeleteFile removes the request's path.
func (m *Manager) DeleteFile(ctx context.Context, req FileRequest, recursive bool) (res workspace.DeleteResult, err error) {
	err = m.fileOp(ctx, KindFileDelete, req, func(rec *audit.Record, key string) error {
		if recursive {
			setDetail(rec, "recursive", "true")
		}
		res, err = m.deps.Workspaces.Delete(ctx, key, req.Path, recursive)
		rec.Bytes = res.Size
		return err
	})
	return res, err
}
