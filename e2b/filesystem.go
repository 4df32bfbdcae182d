package e2b

import (
	"errors"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// envd's filesystem.Filesystem service over the session's workspace: each
// call is one of the manager's file operations (audited, quota-checked,
// confined to the workspace), except MakeDir and Move, which the
// manager's file API has no operation for: they run as `mkdir -p` and
// `mv` commands through the whole pipeline (risk, policy, approval,
// audit), which the approver sees as such. WatchDir and the watcher
// methods are not served (unimplemented).

// entryInfo is envd's EntryInfo in proto3 JSON: size is an int64, so a
// string; type an enum name.
type entryInfo struct {
	Name          string    `json:"name"`
	Type          string    `json:"type"`
	Path          string    `json:"path"`
	Size          string    `json:"size"`
	Mode          uint32    `json:"mode"`
	Permissions   string    `json:"permissions"`
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	ModifiedTime  time.Time `json:"modifiedTime,omitzero"`
	SymlinkTarget *string   `json:"symlinkTarget,omitempty"`
}

type pathRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type entryResponse struct {
	Entry entryInfo `json:"entry"`
}

type listResponse struct {
	Entries []entryInfo `json:"entries"`
}

// The file types of the enum FileType.
const (
	fileTypeFile    = "FILE_TYPE_FILE"
	fileTypeDir     = "FILE_TYPE_DIRECTORY"
	fileTypeSymlink = "FILE_TYPE_SYMLINK"
)

// entryOf is a workspace entry as envd describes it. The workspace API
// keeps no mode or owner: files show as the E2B user's, 0644 (0755 for
// directories), which is what a command running as the session's uid can
// do with them.
func entryOf(e workspace.Entry, sp workspace.Spelling) entryInfo {
	p := sp.Show(e.Path)
	out := entryInfo{Name: path.Base(p), Path: p, Size: strconv.FormatInt(e.Size, 10), Owner: "user", Group: "user",
		ModifiedTime: e.Modified}
	switch e.Type {
	case "dir":
		out.Type, out.Mode, out.Permissions = fileTypeDir, 0o20000000755, "drwxr-xr-x"
	case "symlink":
		out.Type, out.Mode, out.Permissions = fileTypeSymlink, 0o1000000777, "Lrwxrwxrwx"
		t := "" // the target is never read or revealed
		out.SymlinkTarget = &t
	case "file":
		out.Type, out.Mode, out.Permissions = fileTypeFile, 0o644, "-rw-r--r--"
	default:
		out.Type = "FILE_TYPE_UNSPECIFIED" // the SDK skips it
	}
	return out
}

// filesystemRPC serves POST /e2b/filesystem.Filesystem/{method}.
func (s *Server) filesystemRPC(w http.ResponseWriter, r *http.Request) {
	sb, status, msg := s.sandboxOf(r, false)
	if sb == nil {
		writeUnaryError(w, rpcErr(statusCode(status), msg))
		return
	}
	r = sandboxContext(r, sb)
	var res any
	var err *rpcError
	switch r.PathValue("method") {
	case "Stat":
		res, err = s.fsStat(r, sb)
	case "ListDir":
		res, err = s.fsListDir(r, sb)
	case "Remove":
		res, err = s.fsRemove(r, sb)
	case "MakeDir":
		res, err = s.fsMakeDir(r, sb)
	case "Move":
		res, err = s.fsMove(r, sb)
	default:
		err = rpcErr(codeUnimplemented, "filesystem."+manager.Printable(r.PathValue("method"), 64)+" is not served by sandgate")
	}
	if err != nil {
		writeUnaryError(w, err)
		return
	}
	writeUnary(w, res)
}

// statusCode is the Connect code of a sandboxOf refusal.
func statusCode(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return codeUnauthenticated
	case http.StatusBadGateway:
		return codeUnavailable
	}
	return codeInvalidArgument
}

func (s *Server) fileRequest(r *http.Request, sb *sandbox, ws string) manager.FileRequest {
	return manager.FileRequest{RequestID: manager.RequestIDFrom(r.Context()), Principal: sb.principal, SessionID: sb.id, Path: ws}
}

// stat finds ws's entry: a file's own, or, for a directory, its entry in
// its parent's listing (the workspace root has none: made up).
func (s *Server) stat(r *http.Request, sb *sandbox, ws string) (workspace.Entry, error) {
	l, err := s.deps.Manager.ListFiles(r.Context(), s.fileRequest(r, sb, ws), 1)
	if err != nil {
		return workspace.Entry{}, err
	}
	if len(l.Entries) == 1 && l.Entries[0].Path == ws && l.Entries[0].Type != "dir" {
		return l.Entries[0], nil
	}
	dir := workspace.Entry{Path: ws, Type: "dir"}
	if ws == workspace.Mount {
		return dir, nil
	}
	parent, err := s.deps.Manager.ListFiles(r.Context(), s.fileRequest(r, sb, path.Dir(ws)), 1)
	if err == nil {
		for _, e := range parent.Entries {
			if e.Path == ws {
				return e, nil
			}
		}
	}
	return dir, nil
}

func (s *Server) fsStat(r *http.Request, sb *sandbox) (any, *rpcError) {
	var req pathRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	ws, sp, ok := toWorkspace(req.Path)
	if !ok {
		return nil, rpcErr(codeInvalidArgument, errOutside)
	}
	e, err := s.stat(r, sb, ws)
	if err != nil {
		return nil, rpcOf(r, err)
	}
	return entryResponse{Entry: entryOf(e, sp)}, nil
}

func (s *Server) fsListDir(r *http.Request, sb *sandbox) (any, *rpcError) {
	var req pathRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	ws, sp, ok := toWorkspace(req.Path)
	if !ok {
		return nil, rpcErr(codeInvalidArgument, errOutside)
	}
	depth := int(max(req.Depth, 1))
	l, err := s.deps.Manager.ListFiles(r.Context(), s.fileRequest(r, sb, ws), depth)
	if err != nil {
		return nil, rpcOf(r, err)
	}
	if len(l.Entries) == 1 && l.Entries[0].Path == ws && l.Entries[0].Type != "dir" {
		return nil, rpcErr(codeInvalidArgument, "the path is not a directory")
	}
	out := listResponse{Entries: make([]entryInfo, 0, len(l.Entries))}
	for _, e := range l.Entries {
		out.Entries = append(out.Entries, entryOf(e, sp))
	}
	return out, nil
}

func (s *Server) fsRemove(r *http.Request, sb *sandbox) (any, *rpcError) {
	var req pathRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	ws, _, ok := toWorkspace(req.Path)
	if !ok {
		return nil, rpcErr(codeInvalidArgument, errOutside)
	}
	if _, err := s.deps.Manager.DeleteFile(r.Context(), s.fileRequest(r, sb, ws), true); err != nil {
		return nil, rpcOf(r, err)
	}
	return struct{}{}, nil
}

// fsMakeDir creates a directory and its parents: already_exists when it
// exists (the SDK's makeDir answers false).
func (s *Server) fsMakeDir(r *http.Request, sb *sandbox) (any, *rpcError) {
	var req pathRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	ws, sp, ok := toWorkspace(req.Path)
	if !ok {
		return nil, rpcErr(codeInvalidArgument, errOutside)
	}
	if _, err := workspace.ResolvePath(ws); err != nil {
		return nil, rpcOf(r, err)
	}
	if e, err := s.stat(r, sb, ws); err == nil {
		if e.Type == "dir" {
			return nil, rpcErr(codeAlreadyExists, "the directory exists")
		}
		return nil, rpcErr(codeAlreadyExists, "a file exists at the path")
	} else if code, _, _ := errcode.Of(err); code != errcode.NotFound {
		return nil, rpcOf(r, err)
	}
	if err := s.command(r, sb, "mkdir -p -- "+shellQuote(ws)); err != nil {
		return nil, err
	}
	e, err := s.stat(r, sb, ws)
	if err != nil {
		return nil, rpcOf(r, err)
	}
	return entryResponse{Entry: entryOf(e, sp)}, nil
}

func (s *Server) fsMove(r *http.Request, sb *sandbox) (any, *rpcError) {
	var req moveRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	src, _, ok1 := toWorkspace(req.Source)
	dst, sp, ok2 := toWorkspace(req.Destination)
	if !ok1 || !ok2 {
		return nil, rpcErr(codeInvalidArgument, errOutside)
	}
	for _, p := range []string{src, dst} {
		if _, err := workspace.ResolvePath(p); err != nil {
			return nil, rpcOf(r, err)
		}
	}
	if _, err := s.stat(r, sb, src); err != nil {
		return nil, rpcOf(r, err)
	}
	if err := s.command(r, sb, "mkdir -p -- "+shellQuote(path.Dir(dst))+" && mv -T -- "+shellQuote(src)+" "+shellQuote(dst)); err != nil {
		return nil, err
	}
	e, err := s.stat(r, sb, dst)
	if err != nil {
		return nil, rpcOf(r, err)
	}
	return entryResponse{Entry: entryOf(e, sp)}, nil
}

// command runs a helper command of a filesystem call through the
// pipeline; a non-zero exit is a failed_precondition carrying its stderr.
func (s *Server) command(r *http.Request, sb *sandbox, code string) *rpcError {
	res, err := s.deps.Manager.Run(r.Context(), manager.RunRequest{
		RequestID: manager.RequestIDFrom(r.Context()), Kind: manager.KindExecute, Principal: sb.principal,
		SessionID: sb.id, Language: "bash", Code: code, Via: sb.via(),
	})
	if err != nil {
		return rpcOf(r, err)
	}
	if res.Result.ExitCode != 0 {
		return rpcErr(codeFailedPrecondition, strings.TrimSpace(manager.Printable(res.Result.Stderr, 512)))
	}
	return nil
}

// shellQuote quotes s for bash as one word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// rpcOf maps a manager error to a Connect error: the stable code's
// nearest Connect code, errcode's client-safe message, the policy's
// reasons and the request id. Internal text never reaches the client.
func rpcOf(r *http.Request, err error) *rpcError {
	code, _, msg := errcode.Of(err)
	var c string
	switch code {
	case errcode.NotFound:
		c = codeNotFound
	case errcode.InvalidRequest, errcode.PathTraversal, errcode.BinaryFile:
		c = codeInvalidArgument
	case errcode.Conflict:
		c = codeAlreadyExists
	case errcode.Unauthorized:
		c = codeUnauthenticated
	case errcode.Forbidden, errcode.PolicyDenied, errcode.ApprovalDenied, errcode.ApprovalTimeout, errcode.ApprovalUnavailable:
		c = codePermissionDenied
	case errcode.RateLimited, errcode.QuotaExceeded, errcode.PayloadTooLarge, errcode.FileTooLarge, errcode.InsufficientStorage:
		c = codeResourceExhausted
	case errcode.Cancelled:
		c = codeCanceled
	case errcode.ExecutorUnavailable, errcode.PoolExhausted, errcode.SessionUnavailable, errcode.ReplicaUnavailable:
		c = codeUnavailable
	default:
		c = codeInternal
	}
	var invalid *errcode.ValidationError
	if errors.As(err, &invalid) {
		for _, f := range invalid.Fields {
			msg += "; " + f.Field + ": " + f.Message
		}
	}
	return rpcErr(c, string(code)+": "+msg+reasonsOf(err)+" (request "+manager.RequestIDFrom(r.Context())+")")
}
