package deerflow

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// Capability errors of the AIO routes.
var (
	// errSandboxGone is a capability that is not (or no longer) valid: the
	// URL of a deleted sandbox, or of a deleted session, is dead.
	errSandboxGone = errcode.New(errcode.NotFound, "no such sandbox: it was deleted, or the URL is wrong")
	// errCapabilityScope is a valid capability sent for another sandbox.
	errCapabilityScope = errcode.New(errcode.Forbidden, "this capability belongs to another sandbox")
	errAsyncMode       = invalidField("async_mode", "unsupported", "sandgate runs shell commands synchronously")
)

// aioCall is one AIO call on a sandbox, as its owner.
type aioCall struct {
	sb *sandbox
	p  manager.Principal
}

type aioHandler func(w http.ResponseWriter, r *http.Request, c aioCall) error

// aio checks the URL's capability and renders errors as AIO envelopes.
// The capability is the only credential: no token is read here, and the
// capability is no token anywhere else.
func (s *Server) aio(h aioHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := s.aioServe(w, r, h)
		if err != nil {
			status, d := s.errorOf(w, r, err)
			writeJSON(w, status, aioErrorBody{Message: d.Message, Error: d})
		}
	})
}

// aioServe finds the capability's sandbox in the store, whichever replica
// minted it, and serves the call on the replica serving the sandbox's
// session: here, or forwarded to the live replica that serves it.
func (s *Server) aioServe(w http.ResponseWriter, r *http.Request, h aioHandler) error {
	sb, ok, err := s.deps.Registry.byCapability(r.Context(), r.PathValue("capability"))
	if err != nil {
		return err
	}
	if !ok {
		return errSandboxGone
	}
	if sb.id != r.PathValue("sandbox_id") {
		return errCapabilityScope
	}
	if handled, err := s.route(w, r, sb.sessionKey); handled || err != nil {
		return err
	}
	p := manager.Principal{Role: roleAgent, Name: sb.ownerName + "@deerflow:" + sb.id, Tenant: sb.tenant}
	return h(w, r.WithContext(manager.WithFrontEnd(r.Context(), frontEnd)), aioCall{sb: sb, p: p})
}

func writeAIO[T any](w http.ResponseWriter, data T) {
	writeJSON(w, http.StatusOK, aioResponse[T]{Success: true, Message: "Operation successful", Data: data})
}

// dfUserData is DeerFlow's path prefix (/mnt/user-data/{workspace,
// uploads,outputs}): the file calls accept it as another name of the
// session workspace's root, and answer in the name the call used.
// Commands see the same tree there (Layout, layout.go).
const dfUserData = "/mnt/user-data"

// aioPath is a client path resolved to the workspace's namespace.
type aioPath struct {
	ws    string // as the workspace API takes it
	alias string // the prefix the client used for the root, if not /workspace
}

func resolveAIOPath(p string) aioPath {
	if rest, ok := strings.CutPrefix(p, dfUserData); ok && (rest == "" || rest[0] == '/') {
		return aioPath{ws: workspace.Mount + rest, alias: dfUserData}
	}
	return aioPath{ws: p}
}

// show renders a path the workspace displays (/workspace/...) in the
// client's namespace.
func (a aioPath) show(display string) string {
	if a.alias == "" {
		return display
	}
	if rest, ok := strings.CutPrefix(display, workspace.Mount); ok && (rest == "" || rest[0] == '/') {
		return a.alias + rest
	}
	return display
}

func (c aioCall) fileReq(r *http.Request, p aioPath) manager.FileRequest {
	return manager.FileRequest{RequestID: manager.RequestIDFrom(r.Context()), Principal: c.p, SessionID: c.sb.session, Path: p.ws}
}

// fileFailure answers the workspace's refusals of a file call as AIO 1.9
// does expected filesystem failures: 200, success false, the error in
// data. Anything else (denied, rate-limited, internal) stays an HTTP error.
func fileFailure(w http.ResponseWriter, op string, p aioPath, err error) error {
	if errors.As(err, new(*manager.ValidationError)) {
		return err // a malformed request, not a filesystem failure
	}
	code, _, msg := errcode.Of(err)
	var kind string
	var errno *int
	var errnoName *string
	switch code {
	case errcode.NotFound:
		kind, errno, errnoName = "not_found", ptr(2), ptr("ENOENT")
	case errcode.PathTraversal, errcode.InvalidRequest:
		kind = "invalid_path"
	case errcode.EditNoMatch, errcode.EditAmbiguous:
		kind = "invalid_target"
	case errcode.Conflict:
		kind, errno, errnoName = "already_exists", ptr(17), ptr("EEXIST")
	case errcode.FileTooLarge:
		kind, errno, errnoName = "no_space_left", ptr(27), ptr("EFBIG")
	case errcode.BinaryFile:
		kind = "decode_error"
	default:
		return err
	}
	writeJSON(w, http.StatusOK, aioResponse[aioFileError]{Message: msg, Data: aioFileError{
		Path: p.show(shownPath(p.ws)), Operation: op, Message: msg, ErrorType: kind,
		Errno: errno, ErrnoName: errnoName, Code: string(code),
	}})
	return nil
}

func ptr[T any](v T) *T { return &v }

func (s *Server) aioSandbox(w http.ResponseWriter, _ *http.Request, c aioCall) error {
	writeJSON(w, http.StatusOK, aioSandboxInfo{
		Success: true, Message: "Operation successful",
		Data:    "sandgate session " + c.sb.session + ": commands run through the gateway's policy; files live in " + dfUserData,
		HomeDir: dfWorkdir, Workspace: dfWorkdir, Version: "sandgate",
		Detail: aioSandboxDetail{System: aioSandboxSystem{HomeDir: dfWorkdir, Workspace: dfWorkdir, SessionID: c.sb.session}},
	})
	return nil
}

// aioShellExec runs the command as an execute: risk, policy, approval (the
// call waits while a human decides), the executor the policy names, one
// audit record. Each command is a fresh shell in /mnt/user-data/workspace
// (the layout's workdir): shell session
// ids are accepted, but cwd and exports do not carry over. hard_timeout
// becomes the run's timeout; timeout and no_change_timeout (soft waits
// that return "running") do not apply to a synchronous run.
func (s *Server) aioShellExec(w http.ResponseWriter, r *http.Request, c aioCall) error {
	var body aioShellExecBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	if body.AsyncMode {
		return errAsyncMode
	}
	command := body.Command
	if body.ExecDir != nil && *body.ExecDir != "" {
		p := resolveAIOPath(*body.ExecDir)
		dir, err := workspace.ResolvePath(p.ws)
		if err != nil {
			return err
		}
		// In the name the call used: both are real in the sandbox.
		command = "cd " + shellQuote(p.show(workspace.DisplayPath(dir))) + " && " + command
	}
	timeout := 0
	if body.HardTimeout != nil && *body.HardTimeout > 0 {
		timeout = int(math.Min(math.Ceil(*body.HardTimeout), 3600))
	}
	res, err := s.deps.Manager.Run(r.Context(), manager.RunRequest{
		RequestID: manager.RequestIDFrom(r.Context()), Kind: manager.KindExecute, Principal: c.p, SessionID: c.sb.session,
		Language: "bash", Code: command, TimeoutS: timeout, Via: "DeerFlow sandbox " + c.sb.id,
	})
	if err != nil {
		return err
	}
	writeAIO(w, shellResult(body, res, manager.RequestIDFrom(r.Context())))
	return nil
}

func shellResult(body aioShellExecBody, res *manager.RunResult, id string) aioShellResult {
	out := res.Result
	output := out.Stdout
	if out.Stderr != "" {
		if output != "" && !strings.HasSuffix(output, "\n") {
			output += "\n"
		}
		output += out.Stderr
	}
	shell := "default"
	if body.ID != nil && *body.ID != "" {
		shell = *body.ID
	}
	status, exit := "completed", ptr(out.ExitCode)
	if out.TimedOut {
		status, exit = "hard_timeout", nil
	}
	return aioShellResult{
		SessionID: shell, Command: body.Command, Status: status, Output: output, ExitCode: exit,
		Console: []aioConsoleRecord{{PS1: dfWorkdir + " $", Command: body.Command, Output: output}},
		XSandgate: aioRunExtension{
			RequestID: id, SandboxType: res.SandboxType, Truncated: out.Truncated, TimedOut: out.TimedOut,
			Risk: res.Risk, Decision: viewDecision(res.Decision), Approval: viewApproval(res.Approval),
		},
	}
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// aioShellCreate and aioShellDelete accept DeerFlow's explicit shell
// sessions. sandgate's commands keep no shell state between calls, so a
// shell session is only a name: creating one returns it (a new one when
// none is given), deleting one succeeds.
func (s *Server) aioShellCreate(w http.ResponseWriter, r *http.Request, _ aioCall) error {
	var body aioShellSessionBody
	if r.ContentLength != 0 {
		if err := decodeLenient(r, &body); err != nil {
			return err
		}
	}
	id := manager.RequestIDFrom(r.Context())
	if body.ID != nil && *body.ID != "" {
		id = *body.ID
	}
	writeAIO(w, aioShellSession{SessionID: id, WorkingDir: dfWorkdir})
	return nil
}

func (s *Server) aioShellDelete(w http.ResponseWriter, r *http.Request, _ aioCall) error {
	writeAIO(w, aioShellSession{SessionID: r.PathValue("shell_id"), WorkingDir: dfWorkdir})
	return nil
}

// aioFileRead returns lines [start_line, end_line) of a text file, 0-based
// as AIO counts them; the whole file without them.
func (s *Server) aioFileRead(w http.ResponseWriter, r *http.Request, c aioCall) error {
	var body aioFileReadBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	p := resolveAIOPath(body.File)
	var buf bytes.Buffer
	err := s.deps.Manager.GetFile(r.Context(), c.fileReq(r, p), func(rf *workspace.RawFile) (int64, error) {
		return io.Copy(&buf, io.LimitReader(rf, s.deps.Manager.FileLimits().MaxFileBytes))
	})
	if err == nil && !utf8.Valid(buf.Bytes()) {
		err = errcode.New(errcode.BinaryFile, "the file is not UTF-8 text")
	}
	if err != nil {
		return fileFailure(w, "read", p, err)
	}
	writeAIO(w, aioFileRead{Content: lineRange(buf.String(), body.StartLine, body.EndLine), File: body.File})
	return nil
}

// lineRange cuts text to lines [start, end), each with its newline.
func lineRange(text string, start, end *int) string {
	if start == nil && end == nil {
		return text
	}
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	lo, hi := 0, len(lines)
	if start != nil {
		lo = min(max(*start, 0), len(lines))
	}
	if end != nil {
		hi = min(max(*end, lo), len(lines))
	}
	return strings.Join(lines[lo:hi], "")
}

func (s *Server) aioFileWrite(w http.ResponseWriter, r *http.Request, c aioCall) error {
	var body aioFileWriteBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	if body.Content == nil {
		return invalidField("content", "required", "is required")
	}
	data := []byte(*body.Content)
	switch body.Encoding {
	case "", "utf-8", "raw":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(*body.Content); err != nil {
			return invalidField("content", "invalid", "is not valid base64")
		}
	default:
		return invalidField("encoding", "invalid", "must be utf-8, base64 or raw")
	}
	if body.LeadingNewline {
		data = append([]byte("\n"), data...)
	}
	if body.TrailingNewline {
		data = append(data, '\n')
	}
	mode := workspace.WriteOverwrite
	if body.Append {
		mode = workspace.WriteAppend
	}
	p := resolveAIOPath(body.File)
	res, err := s.deps.Manager.WriteFile(r.Context(), c.fileReq(r, p), mode, bytes.NewReader(data))
	if err != nil {
		return fileFailure(w, "write", p, err)
	}
	writeAIO(w, aioFileWrite{File: body.File, BytesWritten: res.Written})
	return nil
}

// aioMaxDepth is the depth of a recursive listing without max_depth.
const aioMaxDepth = 32

func (s *Server) aioFileList(w http.ResponseWriter, r *http.Request, c aioCall) error {
	var body aioFileListBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	depth := 1
	if body.Recursive {
		depth = aioMaxDepth
		if body.MaxDepth != nil && *body.MaxDepth > 0 {
			depth = *body.MaxDepth
		}
	}
	p := resolveAIOPath(body.Path)
	l, err := s.deps.Manager.ListFiles(r.Context(), c.fileReq(r, p), depth)
	if err != nil {
		return fileFailure(w, "list", p, err)
	}
	writeAIO(w, listView(body, p, l))
	return nil
}

func listView(body aioFileListBody, p aioPath, l workspace.Listing) aioFileList {
	out := aioFileList{Path: body.Path, Files: []aioFileInfo{}, Truncated: l.Truncated}
	hidden := body.ShowHidden == nil || *body.ShowHidden
	for _, e := range l.Entries {
		name := path.Base(e.Path)
		if !hidden && strings.HasPrefix(name, ".") {
			continue
		}
		dir := e.Type == "dir"
		info := aioFileInfo{Name: name, Path: p.show(e.Path), IsDirectory: dir,
			ModifiedTime: e.Modified.Format(time.RFC3339)}
		if !dir {
			info.Size = ptr(e.Size)
			if ext := path.Ext(name); ext != "" {
				info.Extension = ptr(ext)
			}
			if len(body.FileTypes) > 0 && !hasExt(body.FileTypes, path.Ext(name)) {
				continue
			}
			out.FileCount++
		} else {
			out.DirectoryCount++
		}
		out.Files = append(out.Files, info)
	}
	out.TotalCount = len(out.Files)
	return out
}

func hasExt(types []string, ext string) bool {
	for _, t := range types {
		if strings.EqualFold(strings.TrimPrefix(t, "."), strings.TrimPrefix(ext, ".")) {
			return true
		}
	}
	return false
}

// aioFileFind lists the regular files under path matching glob (relative
// to path, "**" for any depth).
func (s *Server) aioFileFind(w http.ResponseWriter, r *http.Request, c aioCall) error {
	var body aioFileFindBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	p := resolveAIOPath(body.Path)
	l, err := s.deps.Manager.GlobFiles(r.Context(), c.fileReq(r, p), body.Glob)
	if err != nil {
		return fileFailure(w, "find", p, err)
	}
	out := aioFileFind{Path: body.Path, Files: []string{}, Truncated: l.Truncated}
	for _, e := range l.Entries {
		if e.Type == "file" {
			out.Files = append(out.Files, p.show(e.Path))
		}
	}
	writeAIO(w, out)
	return nil
}

// aioFileSearch is a regular expression over one file's lines; line
// numbers count from 1, as grep's do.
func (s *Server) aioFileSearch(w http.ResponseWriter, r *http.Request, c aioCall) error {
	var body aioFileSearchBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	p := resolveAIOPath(body.File)
	res, err := s.deps.Manager.GrepFiles(r.Context(), c.fileReq(r, p), workspace.GrepQuery{Pattern: body.Regex})
	if err != nil {
		return fileFailure(w, "search", p, err)
	}
	out := aioFileSearch{File: body.File, Matches: []string{}, LineNumbers: []int{}, Truncated: res.Truncated}
	for _, m := range res.Matches {
		out.Matches = append(out.Matches, m.Text)
		out.LineNumbers = append(out.LineNumbers, m.Line)
	}
	writeAIO(w, out)
	return nil
}

func (s *Server) aioFileGrep(w http.ResponseWriter, r *http.Request, c aioCall) error {
	var body aioFileGrepBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	if len(body.Include) > 1 {
		return invalidField("include", "invalid", "at most one glob")
	}
	q := workspace.GrepQuery{Pattern: body.Pattern, Literal: body.FixedStrings}
	if body.CaseInsensitive {
		if q.Literal {
			q.Pattern, q.Literal = regexp.QuoteMeta(q.Pattern), false
		}
		q.Pattern = "(?i)" + q.Pattern
	}
	if len(body.Include) == 1 {
		q.Glob = body.Include[0]
	}
	p := resolveAIOPath(body.Path)
	res, err := s.deps.Manager.GrepFiles(r.Context(), c.fileReq(r, p), q)
	if err != nil {
		return fileFailure(w, "grep", p, err)
	}
	out := aioFileGrep{Path: body.Path, Pattern: body.Pattern, Matches: []aioGrepMatch{},
		FilesSearched: res.FilesScanned, Truncated: res.Truncated}
	for _, m := range res.Matches {
		if body.MaxResults != nil && *body.MaxResults > 0 && len(out.Matches) == *body.MaxResults {
			out.Truncated = true
			break
		}
		out.Matches = append(out.Matches, aioGrepMatch{File: p.show(m.Path), LineNumber: m.Line, LineContent: m.Text})
	}
	out.MatchCount = len(out.Matches)
	writeAIO(w, out)
	return nil
}

// aioFileReplace replaces every occurrence of old_str, as AIO's does.
func (s *Server) aioFileReplace(w http.ResponseWriter, r *http.Request, c aioCall) error {
	var body aioFileReplaceBody
	if err := decodeLenient(r, &body); err != nil {
		return err
	}
	p := resolveAIOPath(body.File)
	res, err := s.deps.Manager.EditFile(r.Context(), c.fileReq(r, p), body.OldStr, body.NewStr, true)
	if err != nil {
		return fileFailure(w, "replace", p, err)
	}
	writeAIO(w, aioFileReplace{File: body.File, ReplacedCount: res.Occurrences})
	return nil
}

// aioFileDownload streams a file's bytes; failures are HTTP errors, as
// AIO's download signals them.
func (s *Server) aioFileDownload(w http.ResponseWriter, r *http.Request, c aioCall) error {
	raw := r.URL.Query().Get("path")
	if raw == "" {
		return invalidField("path", "required", "is required")
	}
	p := resolveAIOPath(raw)
	return s.deps.Manager.GetFile(r.Context(), c.fileReq(r, p), func(rf *workspace.RawFile) (int64, error) {
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(raw)}))
		cw := &countingWriter{ResponseWriter: w}
		http.ServeContent(cw, r, "", rf.ModTime, rf.File)
		return cw.n, nil
	})
}

// shownPath is a workspace path as the workspace displays it
// (/workspace/...), or "" when it is not one.
func shownPath(p string) string {
	rel, err := workspace.ResolvePath(p)
	if err != nil {
		return ""
	}
	return workspace.DisplayPath(rel)
}

// countingWriter counts the bytes of a download, for its audit record.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) ReadFrom(src io.Reader) (int64, error) {
	n, err := io.Copy(c.ResponseWriter, src)
	c.n += n
	return n, err
}
