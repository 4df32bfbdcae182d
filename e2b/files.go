package e2b

import (
	"compress/gzip"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// envd's plain HTTP: GET /files (download), POST /files (upload, as
// multipart/form-data or application/octet-stream, gzip allowed) and
// GET /health. Each file is one of the manager's file operations. Errors
// use envd's {code, message} body, which the SDK maps by status (400
// InvalidArgumentError, 401 AuthenticationError, 404 NotFoundError, 507
// NotEnoughSpaceError; otherwise SandboxError).

type fileError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeFileError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, fileError{Code: status, Message: msg})
}

// fileErrorOf answers a manager error.
func (s *Server) fileErrorOf(w http.ResponseWriter, r *http.Request, err error) {
	code, status, _ := errcode.Of(err)
	if status >= 500 && code != errcode.InsufficientStorage {
		s.log.ErrorContext(r.Context(), "e2b file request failed", "request_id", manager.RequestIDFrom(r.Context()), "err", err)
	}
	writeFileError(w, status, rpcOf(r, err).Message)
}

// uploaded is one written file as the upload's answer lists it.
type uploaded struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// getFile serves a download: the file's bytes.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	sb, status, msg := s.sandboxOf(r, false)
	if sb == nil {
		writeFileError(w, status, msg)
		return
	}
	r = sandboxContext(r, sb)
	ws, _, ok := toWorkspace(r.URL.Query().Get("path"))
	if !ok {
		writeFileError(w, http.StatusBadRequest, errOutside)
		return
	}
	started := false
	err := s.deps.Manager.GetFile(r.Context(), s.fileRequest(r, sb, ws), func(f *workspace.RawFile) (int64, error) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(f.Size, 10))
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		started = true
		return io.Copy(w, f)
	})
	if err != nil && !started {
		s.fileErrorOf(w, r, err)
	}
}

// postFiles serves an upload. Multipart parts are named "file" and their
// filename is the target path (the SDK's write of several files sends no
// ?path=); an octet-stream body goes to ?path=.
func (s *Server) postFiles(w http.ResponseWriter, r *http.Request) {
	sb, status, msg := s.sandboxOf(r, false)
	if sb == nil {
		writeFileError(w, status, msg)
		return
	}
	r = sandboxContext(r, sb)
	target := r.URL.Query().Get("path")
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []uploaded
	switch mt {
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeFileError(w, http.StatusBadRequest, "the multipart body could not be read")
				return
			}
			if part.FormName() != "file" {
				continue
			}
			p := part.FileName()
			if target != "" {
				p = target
			}
			u, ok := s.upload(w, r, sb, p, part)
			if !ok {
				return
			}
			out = append(out, u)
		}
	case "application/octet-stream", "":
		if target == "" {
			writeFileError(w, http.StatusBadRequest, "?path= is required for an octet-stream upload")
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				writeFileError(w, http.StatusBadRequest, "the gzip body could not be read")
				return
			}
			defer zr.Close()
			body = io.LimitReader(zr, s.deps.Manager.FileLimits().MaxFileBytes+1)
		}
		u, ok := s.upload(w, r, sb, target, body)
		if !ok {
			return
		}
		out = append(out, u)
	default:
		writeFileError(w, http.StatusUnsupportedMediaType, "send multipart/form-data or application/octet-stream")
		return
	}
	if len(out) == 0 {
		writeFileError(w, http.StatusBadRequest, "no file in the upload")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// upload writes one file; false when it answered an error.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, sb *sandbox, p string, body io.Reader) (uploaded, bool) {
	ws, sp, ok := toWorkspace(p)
	if !ok {
		writeFileError(w, http.StatusBadRequest, errOutside)
		return uploaded{}, false
	}
	if _, err := s.deps.Manager.WriteFile(r.Context(), s.fileRequest(r, sb, ws), workspace.WriteOverwrite, body); err != nil {
		s.fileErrorOf(w, r, err)
		return uploaded{}, false
	}
	shown := sp.Show(ws)
	return uploaded{Path: shown, Name: path.Base(shown), Type: "file"}, true
}

// health answers 204 for a sandbox this gateway serves whose session is
// live and not paused, 502 otherwise (the SDK's isRunning reads 502 as not running).
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	sb, status, msg := s.sandboxOf(r, false)
	if sb == nil {
		writeFileError(w, status, msg)
		return
	}
	info, err := s.deps.Manager.Session(r.Context(), sb.principal, sb.id)
	if code, _, _ := errcode.Of(err); code == errcode.NotFound || (err == nil && !live(info.State)) {
		_ = s.deps.Registry.forget(r.Context(), sb.id) // the session is gone; so is its record
		writeFileError(w, http.StatusBadGateway, "the sandbox is not running")
		return
	}
	if err != nil {
		s.fileErrorOf(w, r, err)
		return
	}
	if info.State == manager.StatePaused {
		// As E2B's isRunning reads a paused sandbox; connect resumes it.
		writeFileError(w, http.StatusBadGateway, "the sandbox is paused (Sandbox.connect resumes it)")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
