package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// fileError is the AIO FileOperationError (aio-api.md §1.3): the data of an
// HTTP 200 success:false answer to an expected filesystem failure.
type fileError struct {
	Path          string  `json:"path"`
	Operation     string  `json:"operation"`
	Message       string  `json:"message"`
	ErrorType     string  `json:"error_type"`
	Retryable     bool    `json:"retryable"`
	Errno         *int    `json:"errno"`
	ErrnoName     *string `json:"errno_name"`
	ExceptionType *string `json:"exception_type"`
}

// errno names and the Python exception each maps to.
var errnoInfo = map[syscall.Errno]struct{ name, kind, exception, text string }{
	syscall.ENOENT:       {"ENOENT", "not_found", "FileNotFoundError", "No such file or directory"},
	syscall.EACCES:       {"EACCES", "permission_denied", "PermissionError", "Permission denied"},
	syscall.EPERM:        {"EPERM", "permission_denied", "PermissionError", "Operation not permitted"},
	syscall.EISDIR:       {"EISDIR", "invalid_target", "IsADirectoryError", "Is a directory"},
	syscall.ENOTDIR:      {"ENOTDIR", "invalid_target", "NotADirectoryError", "Not a directory"},
	syscall.EEXIST:       {"EEXIST", "already_exists", "FileExistsError", "File exists"},
	syscall.EROFS:        {"EROFS", "read_only_filesystem", "OSError", "Read-only file system"},
	syscall.ENOSPC:       {"ENOSPC", "no_space_left", "OSError", "No space left on device"},
	syscall.EDQUOT:       {"EDQUOT", "no_space_left", "OSError", "Disk quota exceeded"},
	syscall.EFBIG:        {"EFBIG", "no_space_left", "OSError", "File too large"},
	syscall.ELOOP:        {"ELOOP", "invalid_path", "OSError", "Too many levels of symbolic links"},
	syscall.ENAMETOOLONG: {"ENAMETOOLONG", "invalid_path", "OSError", "File name too long"},
}

// fileFail answers an expected failure of op on p the way the real server
// does: HTTP 200, success:false, data = FileOperationError.
func fileFail(w http.ResponseWriter, op, verb, p string, err error) {
	fe := fileError{Path: p, Operation: op, ErrorType: "io_error"}
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		info, ok := errnoInfo[errno]
		if !ok {
			info.name, info.kind, info.exception, info.text = "E"+strconv.Itoa(int(errno)), "io_error", "OSError", errno.Error()
		}
		fe.ErrorType = info.kind
		fe.Errno, fe.ErrnoName, fe.ExceptionType = ptr(int(errno)), ptr(info.name), ptr(info.exception)
		fe.Retryable = errno == syscall.EAGAIN || errno == syscall.EINTR
		fe.Message = fmt.Sprintf("Failed to %s: [Errno %d] %s: '%s'", verb, int(errno), info.text, p)
	case errors.Is(err, errDecode):
		fe.ErrorType, fe.ExceptionType = "decode_error", ptr("UnicodeDecodeError")
		fe.Message = fmt.Sprintf("Failed to %s: %s is not valid UTF-8 text", verb, p)
	case errors.Is(err, errInvalidPath):
		fe.ErrorType, fe.ExceptionType = "invalid_path", ptr("ValueError")
		fe.Message = fmt.Sprintf("Failed to %s: %v", verb, err)
	case errors.Is(err, errInvalidTarget):
		fe.ErrorType, fe.ExceptionType = "invalid_target", ptr("ValueError")
		fe.Message = fmt.Sprintf("Failed to %s: %v", verb, err)
	default:
		fe.ExceptionType = ptr("OSError")
		fe.Message = fmt.Sprintf("Failed to %s: %v", verb, err)
	}
	writeJSON(w, http.StatusOK, envelope{Success: false, Message: ptr(fe.Message), Data: fe})
}

var (
	errDecode        = errors.New("decode error")
	errInvalidPath   = errors.New("invalid path")
	errInvalidTarget = errors.New("invalid target")
)

// absPath checks that p is an absolute path.
func absPath(p string) error {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%w: %q is not an absolute path", errInvalidPath, p)
	}
	return nil
}

type fileReadReq struct {
	File      *string `json:"file"`
	StartLine *int    `json:"start_line"`
	EndLine   *int    `json:"end_line"`
	Sudo      *bool   `json:"sudo"`
}

func (s *server) handleFileRead(w http.ResponseWriter, r *http.Request) {
	var req fileReadReq
	if !decodeBody(w, r, &req, "file") {
		return
	}
	p := *req.File
	if req.Sudo != nil && *req.Sudo {
		fileFail(w, "read", "read file", p, syscall.EPERM)
		return
	}
	if err := absPath(p); err != nil {
		fileFail(w, "read", "read file", p, err)
		return
	}
	b, err := os.ReadFile(p)
	if err != nil {
		fileFail(w, "read", "read file", p, err)
		return
	}
	if !utf8.Valid(b) {
		fileFail(w, "read", "read file", p, errDecode)
		return
	}
	content := string(b)
	if req.StartLine != nil || req.EndLine != nil {
		// 0-based start, exclusive end, over lines that keep their "\n".
		lines := strings.SplitAfter(content, "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		start, end := 0, len(lines)
		if req.StartLine != nil {
			start = clamp(*req.StartLine, 0, len(lines))
		}
		if req.EndLine != nil {
			end = clamp(*req.EndLine, start, len(lines))
		}
		content = strings.Join(lines[start:end], "")
	}
	writeOK(w, map[string]any{"content": content, "file": p})
}

func clamp(v, lo, hi int) int {
	return max(lo, min(v, hi))
}

type fileWriteReq struct {
	File            *string `json:"file"`
	Content         *string `json:"content"`
	Encoding        *string `json:"encoding"`
	Append          *bool   `json:"append"`
	LeadingNewline  *bool   `json:"leading_newline"`
	TrailingNewline *bool   `json:"trailing_newline"`
	Sudo            *bool   `json:"sudo"`
}

func (s *server) handleFileWrite(w http.ResponseWriter, r *http.Request) {
	var req fileWriteReq
	if !decodeBody(w, r, &req, "file", "content") {
		return
	}
	verr := &validationError{}
	literal(verr, "encoding", req.Encoding, "utf-8", "base64", "raw")
	if !check(w, verr) {
		return
	}
	p := *req.File
	if req.Sudo != nil && *req.Sudo {
		fileFail(w, "write", "write file", p, syscall.EPERM)
		return
	}
	if err := absPath(p); err != nil {
		fileFail(w, "write", "write file", p, err)
		return
	}
	data := []byte(*req.Content)
	if req.Encoding != nil && *req.Encoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(*req.Content)
		if err != nil {
			fileFail(w, "write", "write file", p, fmt.Errorf("%w: content is not valid base64", errInvalidTarget))
			return
		}
		data = b
	}
	if req.LeadingNewline != nil && *req.LeadingNewline {
		data = append([]byte("\n"), data...)
	}
	if req.TrailingNewline != nil && *req.TrailingNewline {
		data = append(data, '\n')
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		fileFail(w, "write", "write file", p, err)
		return
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if req.Append != nil && *req.Append {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := os.OpenFile(p, flags, 0o644)
	if err != nil {
		fileFail(w, "write", "write file", p, err)
		return
	}
	n, err := f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fileFail(w, "write", "write file", p, err)
		return
	}
	writeOK(w, map[string]any{"file": p, "bytes_written": n})
}

type fileListReq struct {
	Path               *string  `json:"path"`
	Recursive          bool     `json:"recursive"`
	ShowHidden         *bool    `json:"show_hidden"`
	FileTypes          []string `json:"file_types"`
	MaxDepth           *int     `json:"max_depth"`
	IncludeSize        *bool    `json:"include_size"`
	IncludePermissions bool     `json:"include_permissions"`
	SortBy             *string  `json:"sort_by"`
	SortDesc           bool     `json:"sort_desc"`
}

type fileInfo struct {
	Name         string  `json:"name"`
	Path         string  `json:"path"`
	IsDirectory  bool    `json:"is_directory"`
	Size         *int64  `json:"size"`
	ModifiedTime *string `json:"modified_time"`
	Permissions  *string `json:"permissions"`
	Extension    *string `json:"extension"`
	mtime        time.Time
}

// maxListEntries bounds one listing.
const maxListEntries = 10000

func (s *server) handleFileList(w http.ResponseWriter, r *http.Request) {
	var req fileListReq
	if !decodeBody(w, r, &req, "path") {
		return
	}
	verr := &validationError{}
	literal(verr, "sort_by", req.SortBy, "name", "size", "modified", "type")
	if !check(w, verr) {
		return
	}
	root := *req.Path
	if err := absPath(root); err != nil {
		fileFail(w, "list", "list directory", root, err)
		return
	}
	fi, err := os.Stat(root)
	if err != nil {
		fileFail(w, "list", "list directory", root, err)
		return
	}
	if !fi.IsDir() {
		fileFail(w, "list", "list directory", root, syscall.ENOTDIR)
		return
	}
	hidden := req.ShowHidden == nil || *req.ShowHidden
	withSize := req.IncludeSize == nil || *req.IncludeSize
	maxDepth := 1
	if req.Recursive {
		maxDepth = 1 << 30
		if req.MaxDepth != nil && *req.MaxDepth > 0 {
			maxDepth = *req.MaxDepth
		}
	}
	types := map[string]bool{}
	for _, t := range req.FileTypes {
		types[strings.ToLower(strings.TrimPrefix(t, "."))] = true
	}
	files := []fileInfo{}
	dirs, regular := 0, 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if p == root {
			return err // an unreadable root ends the walk with no entries
		}
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		depth := strings.Count(rel, "/") + 1
		if !hidden && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if depth > maxDepth {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		// As Python's splitext: a leading dot does not start an extension.
		ext := strings.TrimPrefix(path.Ext(strings.TrimLeft(d.Name(), ".")), ".")
		if len(types) > 0 && !d.IsDir() && !types[strings.ToLower(ext)] {
			return nil
		}
		if len(files) >= maxListEntries {
			return filepath.SkipAll
		}
		info := fileInfo{Name: d.Name(), Path: p, IsDirectory: d.IsDir()}
		if ext != "" && !d.IsDir() {
			info.Extension = ptr("." + ext)
		}
		if st, err := d.Info(); err == nil {
			info.mtime = st.ModTime()
			info.ModifiedTime = ptr(st.ModTime().UTC().Format(time.RFC3339))
			if withSize && !d.IsDir() {
				info.Size = ptr(st.Size())
			}
			if req.IncludePermissions {
				info.Permissions = ptr(fmt.Sprintf("%04o", st.Mode().Perm()))
			}
		}
		if d.IsDir() {
			dirs++
		} else {
			regular++
		}
		files = append(files, info)
		if d.IsDir() && depth >= maxDepth {
			return filepath.SkipDir
		}
		return nil
	})
	sortBy := "name"
	if req.SortBy != nil {
		sortBy = *req.SortBy
	}
	sort.SliceStable(files, func(i, j int) bool {
		a, b := files[i], files[j]
		var less bool
		switch sortBy {
		case "size":
			less = deref(a.Size) < deref(b.Size)
		case "modified":
			less = a.mtime.Before(b.mtime)
		case "type":
			less = a.IsDirectory && !b.IsDirectory || a.IsDirectory == b.IsDirectory && a.Path < b.Path
		default:
			less = a.Path < b.Path
		}
		if req.SortDesc {
			return !less
		}
		return less
	})
	writeOK(w, map[string]any{"path": root, "files": files, "total_count": len(files), "directory_count": dirs, "file_count": regular})
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

type fileFindReq struct {
	Path *string `json:"path"`
	Glob *string `json:"glob"`
}

func (s *server) handleFileFind(w http.ResponseWriter, r *http.Request) {
	var req fileFindReq
	if !decodeBody(w, r, &req, "path", "glob") {
		return
	}
	root := *req.Path
	if err := absPath(root); err != nil {
		fileFail(w, "find", "find files", root, err)
		return
	}
	if _, err := path.Match(*req.Glob, ""); err != nil {
		fileFail(w, "find", "find files", root, fmt.Errorf("%w: bad glob %q", errInvalidPath, *req.Glob))
		return
	}
	if _, err := os.Stat(root); err != nil {
		fileFail(w, "find", "find files", root, err)
		return
	}
	files := []string{}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if ok, _ := path.Match(*req.Glob, d.Name()); ok {
			files = append(files, p)
		}
		if len(files) >= maxListEntries {
			return filepath.SkipAll
		}
		return nil
	})
	sort.Strings(files)
	writeOK(w, map[string]any{"path": root, "files": files})
}

type fileGrepReq struct {
	Path            *string `json:"path"`
	Pattern         *string `json:"pattern"`
	Include         *string `json:"include"`
	Exclude         *string `json:"exclude"`
	CaseInsensitive bool    `json:"case_insensitive"`
	FixedStrings    bool    `json:"fixed_strings"`
	ContextBefore   int     `json:"context_before"`
	ContextAfter    int     `json:"context_after"`
	MaxResults      *int    `json:"max_results"`
	MaxFileSize     *string `json:"max_file_size"`
	Multiline       bool    `json:"multiline"`
	Offset          int     `json:"offset"`
	Type            *string `json:"type"`
	Recursive       *bool   `json:"recursive"`
}

type grepMatch struct {
	File          string   `json:"file"`
	LineNumber    int      `json:"line_number"`
	LineContent   string   `json:"line_content"`
	ContextBefore []string `json:"context_before"`
	ContextAfter  []string `json:"context_after"`
}

func (s *server) handleFileGrep(w http.ResponseWriter, r *http.Request) {
	var req fileGrepReq
	if !decodeBody(w, r, &req, "path", "pattern") {
		return
	}
	root := *req.Path
	if err := absPath(root); err != nil {
		fileFail(w, "grep", "grep files", root, err)
		return
	}
	pat := *req.Pattern
	if req.FixedStrings {
		pat = regexp.QuoteMeta(pat)
	}
	if req.CaseInsensitive {
		pat = "(?i)" + pat
	}
	if req.Multiline {
		pat = "(?s)" + pat
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		fileFail(w, "grep", "grep files", root, fmt.Errorf("%w: bad pattern: %v", errInvalidPath, err))
		return
	}
	maxResults := 500
	if req.MaxResults != nil && *req.MaxResults > 0 {
		maxResults = *req.MaxResults
	}
	maxSize := int64(1 << 20)
	if req.MaxFileSize != nil {
		if n, ok := parseSize(*req.MaxFileSize); ok {
			maxSize = n
		}
	}
	fi, err := os.Stat(root)
	if err != nil {
		fileFail(w, "grep", "grep files", root, err)
		return
	}
	recursive := req.Recursive == nil || *req.Recursive
	matches := []grepMatch{}
	searched, matched, skipped := 0, 0, 0
	truncated := false
	grepFile := func(p string) {
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() || st.Size() > maxSize {
			return
		}
		b, err := os.ReadFile(p)
		if err != nil || bytes.IndexByte(b, 0) >= 0 { // binary files are skipped, as rg does
			return
		}
		searched++
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		hit := false
		for i, line := range lines {
			if !re.MatchString(line) {
				continue
			}
			hit = true
			if skipped < req.Offset {
				skipped++
				continue
			}
			if len(matches) >= maxResults {
				truncated = true
				return
			}
			m := grepMatch{File: p, LineNumber: i + 1, LineContent: line, ContextBefore: []string{}, ContextAfter: []string{}}
			m.ContextBefore = append(m.ContextBefore, lines[max(0, i-req.ContextBefore):i]...)
			m.ContextAfter = append(m.ContextAfter, lines[i+1:min(len(lines), i+1+req.ContextAfter)]...)
			matches = append(matches, m)
		}
		if hit {
			matched++
		}
	}
	if !fi.IsDir() {
		grepFile(root)
	} else {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				if p != root && (!recursive || strings.HasPrefix(d.Name(), ".")) {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") || !globOK(d.Name(), req.Include, req.Exclude) {
				return nil
			}
			grepFile(p)
			if truncated {
				return filepath.SkipAll
			}
			return nil
		})
	}
	writeOK(w, map[string]any{"path": root, "pattern": *req.Pattern, "matches": matches, "match_count": len(matches),
		"files_searched": searched, "files_matched": matched, "truncated": truncated})
}

func globOK(name string, include, exclude *string) bool {
	if include != nil && *include != "" {
		if ok, _ := path.Match(*include, name); !ok {
			return false
		}
	}
	if exclude != nil && *exclude != "" {
		if ok, _ := path.Match(*exclude, name); ok {
			return false
		}
	}
	return true
}

// parseSize reads rg-style sizes: 100, 10K, 1M, 2G.
func parseSize(v string) (int64, bool) {
	v = strings.TrimSpace(strings.ToUpper(v))
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "K"):
		mult, v = 1<<10, strings.TrimSuffix(v, "K")
	case strings.HasSuffix(v, "M"):
		mult, v = 1<<20, strings.TrimSuffix(v, "M")
	case strings.HasSuffix(v, "G"):
		mult, v = 1<<30, strings.TrimSuffix(v, "G")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n * mult, true
}

type fileSearchReq struct {
	File  *string `json:"file"`
	Regex *string `json:"regex"`
	Sudo  *bool   `json:"sudo"`
}

func (s *server) handleFileSearch(w http.ResponseWriter, r *http.Request) {
	var req fileSearchReq
	if !decodeBody(w, r, &req, "file", "regex") {
		return
	}
	p := *req.File
	if err := absPath(p); err != nil {
		fileFail(w, "search", "search file", p, err)
		return
	}
	re, err := regexp.Compile(*req.Regex)
	if err != nil {
		fileFail(w, "search", "search file", p, fmt.Errorf("%w: bad regex: %v", errInvalidPath, err))
		return
	}
	f, err := os.Open(p)
	if err != nil {
		fileFail(w, "search", "search file", p, err)
		return
	}
	defer f.Close()
	matches, numbers := []string{}, []int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if line := sc.Text(); re.MatchString(line) {
			matches, numbers = append(matches, line), append(numbers, n)
		}
	}
	if err := sc.Err(); err != nil {
		fileFail(w, "search", "search file", p, err)
		return
	}
	writeOK(w, map[string]any{"file": p, "matches": matches, "line_numbers": numbers})
}

// maxUpload bounds one multipart upload.
const maxUpload = 512 << 20

func (s *server) handleFileUpload(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		verr := &validationError{}
		verr.add("missing", "Field required", nil, "file")
		writeValidation(w, verr)
		return
	}
	dest := ""
	var written int64
	var fileName string
	var gotFile bool
	var tmp *os.File
	defer func() {
		if tmp != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "There was an error parsing the body"})
			return
		}
		switch part.FormName() {
		case "path":
			b, _ := io.ReadAll(io.LimitReader(part, 4096))
			dest = string(b)
		case "file":
			gotFile, fileName = true, part.FileName()
			// Staged in /tmp: "path" may come after "file" in the body.
			if tmp, err = os.CreateTemp("", "sandboxd-upload-*"); err != nil {
				fileFail(w, "upload", "upload file", dest, err)
				return
			}
			if written, err = io.Copy(tmp, part); err != nil {
				fileFail(w, "upload", "upload file", dest, err)
				return
			}
		}
	}
	if !gotFile {
		verr := &validationError{}
		verr.add("missing", "Field required", nil, "file")
		writeValidation(w, verr)
		return
	}
	if dest == "" {
		dest = filepath.Join(s.cfg.Workspace, filepath.Base(fileName))
	} else if strings.HasSuffix(dest, "/") {
		dest = filepath.Join(dest, filepath.Base(fileName))
	} else if st, err := os.Stat(dest); err == nil && st.IsDir() {
		dest = filepath.Join(dest, filepath.Base(fileName))
	}
	if err := absPath(dest); err != nil {
		fileFail(w, "upload", "upload file", dest, err)
		return
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		fileFail(w, "upload", "upload file", dest, err)
		return
	}
	if err := copyFile(tmp, dest); err != nil {
		fileFail(w, "upload", "upload file", dest, err)
		return
	}
	writeOK(w, map[string]any{"file_path": dest, "file_size": written, "success": true})
}

func copyFile(src *os.File, dest string) error {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return err
	}
	out, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// handleFileDownload streams a file. Unlike the JSON endpoints it signals
// failure with HTTP statuses (aio-api.md §2.4).
func (s *server) handleFileDownload(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []validationItem{{
			Type: "missing", Loc: []any{"query", "path"}, Msg: "Field required"}}})
		return
	}
	if absPath(p) != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "path must be absolute"})
		return
	}
	f, err := os.Open(p)
	if err != nil {
		status, msg := http.StatusInternalServerError, "Failed to open file"
		switch {
		case errors.Is(err, fs.ErrNotExist):
			status, msg = http.StatusNotFound, "File not found: "+p
		case errors.Is(err, fs.ErrPermission):
			status, msg = http.StatusForbidden, "Permission denied: "+p
		}
		writeJSON(w, status, map[string]string{"detail": msg})
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.IsDir() {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Not a regular file: " + p})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(p)}))
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	_, _ = io.Copy(w, f)
}
