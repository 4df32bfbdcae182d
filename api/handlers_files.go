package api

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

// Response bodies of the file endpoints. Paths are always shown as code
// sees them (/workspace/...), never as the host path.
type (
	fileReadResponse struct {
		Path       string `json:"path"`
		Content    string `json:"content"`
		TotalLines int    `json:"total_lines"`
		Truncated  bool   `json:"truncated"`
		NextOffset int    `json:"next_offset,omitempty"`
		RequestID  string `json:"request_id"`
	}
	fileWriteResponse struct {
		Path      string `json:"path"`
		Size      int64  `json:"size"`
		Written   int64  `json:"written"`
		Created   bool   `json:"created"`
		RequestID string `json:"request_id"`
	}
	fileEditResponse struct {
		Path        string `json:"path"`
		Occurrences int    `json:"occurrences"`
		Size        int64  `json:"size"`
		RequestID   string `json:"request_id"`
	}
	fileListResponse struct {
		Path      string            `json:"path"`
		Entries   []workspace.Entry `json:"entries"`
		Truncated bool              `json:"truncated"`
		RequestID string            `json:"request_id"`
	}
	fileGrepResponse struct {
		Path         string                `json:"path"`
		Matches      []workspace.GrepMatch `json:"matches"`
		Truncated    bool                  `json:"truncated"`
		FilesScanned int                   `json:"files_scanned"`
		RequestID    string                `json:"request_id"`
	}
	fileDeleteResponse struct {
		Path      string `json:"path"`
		Deleted   bool   `json:"deleted"`
		Size      int64  `json:"size"`
		RequestID string `json:"request_id"`
	}
)

// editBody is POST .../files/edit. New is a pointer so that a missing
// "new" is refused rather than read as "delete the match".
type editBody struct {
	Path       string  `json:"path"`
	Old        string  `json:"old"`
	New        *string `json:"new"`
	ReplaceAll bool    `json:"replace_all"`
}

var errBadUpload = errcode.New(errcode.InvalidRequest, "the request body could not be read")

// fileQuery parses the query string, once: a "%2e%2e" that survives that
// one decoding is part of a file name, never "..". Unknown and repeated
// parameters are refused, so a typo or a second "path" (which a proxy
// might read differently) cannot slip by.
func fileQuery(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &fieldErr{field: manager.FieldError{Field: "query", Code: "invalid", Message: "is not valid URL query encoding"}}
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case !slices.Contains(allowed, k):
			return nil, &fieldErr{field: manager.FieldError{Field: k, Code: "unknown", Message: "is not a parameter of this endpoint"}}
		case len(q[k]) > 1:
			return nil, &fieldErr{field: manager.FieldError{Field: k, Code: "repeated", Message: "must be given once"}}
		}
	}
	return q, nil
}

// queryRequired returns a parameter that must be present and not empty.
func queryRequired(q url.Values, name string) (string, error) {
	v := q.Get(name)
	if v == "" {
		return "", &fieldErr{field: manager.FieldError{Field: name, Code: "required", Message: "is required"}}
	}
	return v, nil
}

func queryInt(q url.Values, name string, def, lo int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo {
		return 0, &fieldErr{field: manager.FieldError{Field: name, Code: "min", Message: "must be an integer of at least " + strconv.Itoa(lo)}}
	}
	return n, nil
}

func queryBool(q url.Values, name string, def bool) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &fieldErr{field: manager.FieldError{Field: name, Code: "type", Message: "must be true or false"}}
	}
	return b, nil
}

func (s *Server) fileReq(r *http.Request, p string) manager.FileRequest {
	return manager.FileRequest{RequestID: requestID(r.Context()), Principal: principal(r), SessionID: r.PathValue("id"), Path: p}
}

// shownPath is a path as responses show it. It is only called for paths
// an operation accepted, which therefore resolve.
func shownPath(p string) string {
	rel, err := workspace.ResolvePath(p)
	if err != nil {
		return ""
	}
	return workspace.DisplayPath(rel)
}

// getFileContent is the raw download. It supports Range and conditional
// requests (http.ServeContent), and never lets the client sniff a type.
func (s *Server) getFileContent(w http.ResponseWriter, r *http.Request) error {
	q, err := fileQuery(r, "path")
	if err != nil {
		return err
	}
	p, err := queryRequired(q, "path")
	if err != nil {
		return err
	}
	return s.deps.Manager.GetFile(r.Context(), s.fileReq(r, p), func(rf *workspace.RawFile) (int64, error) {
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(shownPath(p))}))
		cw := &countingWriter{ResponseWriter: w}
		http.ServeContent(cw, r, "", rf.ModTime, rf.File)
		return cw.n, nil
	})
}

// countingWriter counts the body bytes sent, keeping the sendfile path of
// the underlying writer.
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

// putFileContent writes the raw body. Its cap is the file-size limit
// (bodyLimit), not the JSON one; 201 when the file was created.
func (s *Server) putFileContent(w http.ResponseWriter, r *http.Request) error {
	q, err := fileQuery(r, "path", "mode")
	if err != nil {
		return err
	}
	p, err := queryRequired(q, "path")
	if err != nil {
		return err
	}
	mode, err := workspace.ParseWriteMode(q.Get("mode"))
	if err != nil {
		return &fieldErr{field: manager.FieldError{Field: "mode", Code: "oneof", Message: "must be one of: overwrite, create, append"}}
	}
	body := &uploadBody{r: r.Body}
	if r.ContentLength > s.deps.Manager.FileLimits().MaxFileBytes {
		body.r = nil // refuse before anything is read or written
	}
	res, err := s.deps.Manager.WriteFile(r.Context(), s.fileReq(r, p), mode, body)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	writeJSON(w, status, fileWriteResponse{Path: shownPath(p), Size: res.Size, Written: res.Written, Created: res.Created, RequestID: requestID(r.Context())})
	return nil
}

// uploadBody gives the errors of reading an upload their codes: over the
// cap is file_too_large, a body that breaks off is invalid_request.
type uploadBody struct{ r io.Reader }

func (b *uploadBody) Read(p []byte) (int, error) {
	if b.r == nil {
		return 0, workspace.ErrFileTooLarge
	}
	n, err := b.r.Read(p)
	if err == nil || err == io.EOF {
		return n, err
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return n, workspace.ErrFileTooLarge
	}
	return n, errors.Join(errBadUpload, err)
}

// readFile is deepagents' read_file: numbered lines from offset (0-based),
// at most limit of them.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	q, err := fileQuery(r, "path", "offset", "limit")
	if err != nil {
		return err
	}
	p, err := queryRequired(q, "path")
	if err != nil {
		return err
	}
	offset, err := queryInt(q, "offset", 0, 0)
	if err != nil {
		return err
	}
	limit, err := queryInt(q, "limit", workspace.DefaultReadLines, 1)
	if err != nil {
		return err
	}
	page, err := s.deps.Manager.ReadFile(r.Context(), s.fileReq(r, p), offset, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileReadResponse{Path: shownPath(p), Content: page.Content, TotalLines: page.TotalLines,
		Truncated: page.Truncated, NextOffset: page.NextOffset, RequestID: requestID(r.Context())})
	return nil
}

func (s *Server) editFile(w http.ResponseWriter, r *http.Request) error {
	var body editBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	switch {
	case body.Path == "":
		return &fieldErr{field: manager.FieldError{Field: "path", Code: "required", Message: "is required"}}
	case body.New == nil:
		return &fieldErr{field: manager.FieldError{Field: "new", Code: "required", Message: `is required (use "" to delete the match)`}}
	}
	res, err := s.deps.Manager.EditFile(r.Context(), s.fileReq(r, body.Path), body.Old, *body.New, body.ReplaceAll)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileEditResponse{Path: shownPath(body.Path), Occurrences: res.Occurrences, Size: res.Size, RequestID: requestID(r.Context())})
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	q, err := fileQuery(r, "path", "depth")
	if err != nil {
		return err
	}
	depth, err := queryInt(q, "depth", 1, 1)
	if err != nil {
		return err
	}
	l, err := s.deps.Manager.ListFiles(r.Context(), s.fileReq(r, q.Get("path")), depth)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileListResponse{Path: shownPath(q.Get("path")), Entries: l.Entries, Truncated: l.Truncated, RequestID: requestID(r.Context())})
	return nil
}

func (s *Server) globFiles(w http.ResponseWriter, r *http.Request) error {
	q, err := fileQuery(r, "pattern", "path")
	if err != nil {
		return err
	}
	pattern, err := queryRequired(q, "pattern")
	if err != nil {
		return err
	}
	l, err := s.deps.Manager.GlobFiles(r.Context(), s.fileReq(r, q.Get("path")), pattern)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileListResponse{Path: shownPath(q.Get("path")), Entries: l.Entries, Truncated: l.Truncated, RequestID: requestID(r.Context())})
	return nil
}

func (s *Server) grepFiles(w http.ResponseWriter, r *http.Request) error {
	q, err := fileQuery(r, "pattern", "path", "glob", "literal")
	if err != nil {
		return err
	}
	pattern, err := queryRequired(q, "pattern")
	if err != nil {
		return err
	}
	literal, err := queryBool(q, "literal", true)
	if err != nil {
		return err
	}
	res, err := s.deps.Manager.GrepFiles(r.Context(), s.fileReq(r, q.Get("path")),
		workspace.GrepQuery{Pattern: pattern, Glob: q.Get("glob"), Literal: literal})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileGrepResponse{Path: shownPath(q.Get("path")), Matches: res.Matches, Truncated: res.Truncated,
		FilesScanned: res.FilesScanned, RequestID: requestID(r.Context())})
	return nil
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) error {
	q, err := fileQuery(r, "path", "recursive")
	if err != nil {
		return err
	}
	p, err := queryRequired(q, "path")
	if err != nil {
		return err
	}
	recursive, err := queryBool(q, "recursive", false)
	if err != nil {
		return err
	}
	res, err := s.deps.Manager.DeleteFile(r.Context(), s.fileReq(r, p), recursive)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileDeleteResponse{Path: shownPath(p), Deleted: true, Size: res.Size, RequestID: requestID(r.Context())})
	return nil
}
