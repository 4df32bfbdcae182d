package daytona

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// The toolbox's file calls over the session's workspace: each is one of
// the manager's file operations (audited, quota-checked, confined to the
// workspace). fs.uploadFile is POST /files/bulk-upload (multipart parts
// files[i].path and files[i].file), fs.downloadFile is POST
// /files/bulk-download (a multipart answer: a "file" part, or an "error"
// part, per path, named by the path as requested), fs.listFiles GET /files,
// fs.deleteFile DELETE /files, fs.createFolder POST /files/folder; GET
// /files/info and /files/download are served too.

// Bounds of one bulk call.
const (
	maxUploadFiles   = 32
	maxDownloadFiles = 256
)

// fileInfo is the toolbox's FileInfo. The workspace keeps no mode or
// owner: files show as the sandbox user's, 0644 (0755 for directories),
// which is what a command running as the session's uid can do with them.
type fileInfo struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	Mode        string `json:"mode"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Group       string `json:"group"`
	ModTime     string `json:"modTime"`
	ModifiedAt  string `json:"modifiedAt"`
}

func infoOf(e workspace.Entry, sp workspace.Spelling) fileInfo {
	p := sp.Show(e.Path)
	out := fileInfo{Name: path.Base(p), Path: p, Size: e.Size, Mode: "-rw-r--r--", Permissions: "0644",
		Owner: user, Group: user, ModTime: stamp(e.Modified), ModifiedAt: stamp(e.Modified)}
	switch e.Type {
	case "dir":
		out.IsDir, out.Mode, out.Permissions = true, "drwxr-xr-x", "0755"
	case "symlink":
		out.Mode, out.Permissions = "Lrwxrwxrwx", "0777"
	}
	if out.ModTime == "" {
		out.ModTime = stamp(time.Unix(0, 0))
		out.ModifiedAt = out.ModTime
	}
	return out
}

func fileRequest(r *http.Request, sb *sandbox, ws string) manager.FileRequest {
	return manager.FileRequest{RequestID: manager.RequestIDFrom(r.Context()), Principal: sb.principal, SessionID: sb.id, Path: ws}
}

// pathArg maps the ?path= of a file call.
func pathArg(r *http.Request) (string, workspace.Spelling, error) {
	ws, sp, ok := toWorkspace(r.URL.Query().Get("path"))
	if !ok {
		return "", "", invalid("path", errOutside)
	}
	return ws, sp, nil
}

func (s *Server) homeDir(w http.ResponseWriter, _ *http.Request, _ *sandbox) error {
	writeJSON(w, http.StatusOK, map[string]string{"dir": workspace.Mount})
	return nil
}

// listFiles answers a directory's entries, depth levels deep (?depth=,
// default 1).
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, sb *sandbox) error {
	ws, sp, err := pathArg(r)
	if err != nil {
		return err
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			return invalid("depth", "must be 1 to 64")
		}
		depth = n
	}
	l, err := s.deps.Manager.ListFiles(r.Context(), fileRequest(r, sb, ws), depth)
	if err != nil {
		return err
	}
	if len(l.Entries) == 1 && l.Entries[0].Path == ws && l.Entries[0].Type != "dir" {
		return invalid("path", "is not a directory")
	}
	out := make([]fileInfo, 0, len(l.Entries))
	for _, e := range l.Entries {
		out = append(out, infoOf(e, sp))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteFile removes a file, or a directory with ?recursive=true.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, sb *sandbox) error {
	ws, _, err := pathArg(r)
	if err != nil {
		return err
	}
	if ws == workspace.Mount {
		return invalid("path", "the sandbox's root cannot be deleted")
	}
	recursive := r.URL.Query().Get("recursive") == "true"
	if _, err := s.deps.Manager.DeleteFile(r.Context(), fileRequest(r, sb, ws), recursive); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// fileInfo answers one entry: a file's own, or, for a directory, its
// entry in its parent's listing.
func (s *Server) fileInfo(w http.ResponseWriter, r *http.Request, sb *sandbox) error {
	ws, sp, err := pathArg(r)
	if err != nil {
		return err
	}
	e, err := s.stat(r, sb, ws)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, infoOf(e, sp))
	return nil
}

func (s *Server) stat(r *http.Request, sb *sandbox, ws string) (workspace.Entry, error) {
	l, err := s.deps.Manager.ListFiles(r.Context(), fileRequest(r, sb, ws), 1)
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
	if parent, err := s.deps.Manager.ListFiles(r.Context(), fileRequest(r, sb, path.Dir(ws)), 1); err == nil {
		for _, e := range parent.Entries {
			if e.Path == ws {
				return e, nil
			}
		}
	}
	return dir, nil
}

// folderMode is createFolder's mode: octal permissions.
var folderMode = regexp.MustCompile(`^0?[0-7]{3}$`)

// createFolder makes a directory and its parents. The workspace API has
// no operation for it, so it runs as a `mkdir -p` command through the
// whole pipeline (risk, policy, approval, audit), which the approver sees
// as such; a non-zero exit is a 400 carrying its stderr.
func (s *Server) createFolder(w http.ResponseWriter, r *http.Request, sb *sandbox) error {
	ws, _, err := pathArg(r)
	if err != nil {
		return err
	}
	if _, err := workspace.ResolvePath(ws); err != nil {
		return err
	}
	code := "mkdir -p -- " + shellQuote(ws)
	if mode := r.URL.Query().Get("mode"); mode != "" {
		if !folderMode.MatchString(mode) {
			return invalid("mode", "must be octal permissions such as 755")
		}
		code = "mkdir -p -m " + mode + " -- " + shellQuote(ws)
	}
	res, err := s.run(w, r, manager.RunRequest{Kind: manager.KindExecute, Principal: sb.principal, SessionID: sb.id,
		Language: "bash", Code: code, Via: sb.via})
	if err != nil {
		return err
	}
	if res.exitCode != 0 {
		return invalid("path", strings.TrimSpace(manager.Printable(res.output, 512)))
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

// downloadFile answers one file's bytes.
func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request, sb *sandbox) error {
	ws, _, err := pathArg(r)
	if err != nil {
		return err
	}
	started := false
	err = s.deps.Manager.GetFile(r.Context(), fileRequest(r, sb, ws), func(f *workspace.RawFile) (int64, error) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(f.Size, 10))
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		started = true
		return io.Copy(w, f)
	})
	if err != nil && started {
		panic(http.ErrAbortHandler) // cut the response: the client must not take a short file for the file
	}
	return err
}

// downloadBody is FilesDownloadRequest.
type downloadBody struct {
	Paths []string `json:"paths"`
}

// bulkDownload answers the files as a multipart/form-data body: for each
// path, as requested, a "file" part with its bytes or an "error" part with
// a JSON error ({message, statusCode, code}), each named by the path in
// its filename, which the SDK matches against what it asked.
func (s *Server) bulkDownload(w http.ResponseWriter, r *http.Request, sb *sandbox) error {
	var body downloadBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	switch {
	case len(body.Paths) == 0:
		return invalid("paths", "at least one path is required")
	case len(body.Paths) > maxDownloadFiles:
		return invalid("paths", fmt.Sprintf("at most %d paths", maxDownloadFiles))
	}
	mw := multipart.NewWriter(w)
	w.Header().Set("Content-Type", mw.FormDataContentType())
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	for _, p := range body.Paths {
		ws, _, ok := toWorkspace(p)
		if !ok {
			writeErrorPart(mw, r, p, invalid("path", errOutside))
			continue
		}
		started := false
		err := s.deps.Manager.GetFile(r.Context(), fileRequest(r, sb, ws), func(f *workspace.RawFile) (int64, error) {
			h := partHeader("file", p, "application/octet-stream")
			h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
			part, err := mw.CreatePart(h)
			if err != nil {
				return 0, err
			}
			started = true
			return io.Copy(part, f)
		})
		switch {
		case err != nil && started:
			panic(http.ErrAbortHandler) // a short part must not pass for the file
		case err != nil:
			writeErrorPart(mw, r, p, err)
		}
	}
	return mw.Close()
}

// partHeader is a form-data part's header; the filename is quoted as
// mime/multipart quotes it.
func partHeader(name, filename, contentType string) textproto.MIMEHeader {
	h := make(textproto.MIMEHeader)
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename="%s"`, name, quoteEscaper.Replace(filename)))
	h.Set("Content-Type", contentType)
	return h
}

var quoteEscaper = strings.NewReplacer("\\", "\\\\", `"`, "\\\"", "\r", "", "\n", "")

func writeErrorPart(mw *multipart.Writer, r *http.Request, p string, err error) {
	code, status, _ := errcode.Of(err)
	part, perr := mw.CreatePart(partHeader("error", p, "application/json"))
	if perr != nil {
		return
	}
	_ = json.NewEncoder(part).Encode(apiError{StatusCode: status, Message: refusal(r, err), Code: string(code), Error: http.StatusText(status)})
}

// uploadField names a bulk upload's parts: files[<i>].path and
// files[<i>].file.
var uploadField = regexp.MustCompile(`^files\[(\d{1,4})\]\.(path|file)$`)

// bulkUpload writes each files[i].file part to its files[i].path (the SDK
// sends the path first; the part's filename is the fallback).
func (s *Server) bulkUpload(w http.ResponseWriter, r *http.Request, sb *sandbox) error {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return invalid("Content-Type", "send multipart/form-data")
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	paths := map[string]string{}
	var written []string
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return errcode.New(errcode.PayloadTooLarge, "the upload exceeds the size limit")
			}
			return invalid("body", "the multipart body could not be read")
		}
		m := uploadField.FindStringSubmatch(part.FormName())
		if m == nil {
			continue
		}
		if m[2] == "path" {
			b, err := io.ReadAll(io.LimitReader(part, 4097))
			if err != nil || len(b) > 4096 {
				return invalid(part.FormName(), "must be a path of at most 4096 bytes")
			}
			paths[m[1]] = string(b)
			continue
		}
		if len(written) == maxUploadFiles {
			return invalid("files", fmt.Sprintf("at most %d files per upload", maxUploadFiles))
		}
		p, ok := paths[m[1]]
		if !ok {
			p = part.FileName()
		}
		ws, sp, ok := toWorkspace(p)
		if !ok || p == "" {
			return invalid("files["+m[1]+"].path", errOutside)
		}
		if _, err := s.deps.Manager.WriteFile(r.Context(), fileRequest(r, sb, ws), workspace.WriteOverwrite, part); err != nil {
			return err
		}
		written = append(written, sp.Show(ws))
	}
	if len(written) == 0 {
		return invalid("files", "no file in the upload")
	}
	writeJSON(w, http.StatusOK, written)
	return nil
}
