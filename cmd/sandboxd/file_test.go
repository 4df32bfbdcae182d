package main

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// TestFileErrorsAre200: expected filesystem failures are HTTP 200 with
// success:false and a FileOperationError (aio-api.md §1.3).
func TestFileErrorsAre200(t *testing.T) {
	ts := newTestServer(t)
	missing := filepath.Join(ts.ws, "missing.txt")
	r := ts.post("/v1/file/read", map[string]any{"file": missing})
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200", r.status)
	}
	fe := r.envelope(t, false)
	want := "Failed to read file: [Errno 2] No such file or directory: '" + missing + "'"
	if r.body["message"] != want || fe["message"] != want {
		t.Errorf("message %q / %q, want %q", r.body["message"], fe["message"], want)
	}
	checks := map[string]any{"path": missing, "operation": "read", "error_type": "not_found", "retryable": false,
		"errno": float64(2), "errno_name": "ENOENT", "exception_type": "FileNotFoundError"}
	for k, v := range checks {
		if fe[k] != v {
			t.Errorf("%s = %v, want %v", k, fe[k], v)
		}
	}
	cases := []struct {
		path string
		body map[string]any
		kind string
	}{
		{"/v1/file/read", map[string]any{"file": ts.ws}, "invalid_target"},
		{"/v1/file/read", map[string]any{"file": "relative.txt"}, "invalid_path"},
		{"/v1/file/write", map[string]any{"file": filepath.Join(ts.writeWS("f", "x"), "child"), "content": "x"}, "invalid_target"},
		{"/v1/file/list", map[string]any{"path": missing}, "not_found"},
		{"/v1/file/find", map[string]any{"path": missing, "glob": "*"}, "not_found"},
		{"/v1/file/grep", map[string]any{"path": missing, "pattern": "x"}, "not_found"},
		{"/v1/file/read", map[string]any{"file": ts.writeWS("bin", "\xff\xfe"), "sudo": false}, "decode_error"},
		{"/v1/file/read", map[string]any{"file": ts.writeWS("g", "x"), "sudo": true}, "permission_denied"},
	}
	for _, c := range cases {
		r := ts.post(c.path, c.body)
		if r.status != http.StatusOK {
			t.Errorf("%s %v: status %d", c.path, c.body, r.status)
			continue
		}
		if fe := r.envelope(t, false); fe["error_type"] != c.kind {
			t.Errorf("%s %v: error_type %v, want %s (%s)", c.path, c.body, fe["error_type"], c.kind, r.raw)
		}
	}
}

func TestFileReadWrite(t *testing.T) {
	ts := newTestServer(t)
	p := filepath.Join(ts.ws, "dir", "a.txt")
	d := ts.post("/v1/file/write", map[string]any{"file": p, "content": "l0\nl1\nl2\nl3\n"}).envelope(t, true)
	if d["file"] != p || num(d["bytes_written"]) != 12 {
		t.Errorf("write %v", d)
	}
	d = ts.post("/v1/file/read", map[string]any{"file": p, "start_line": 1, "end_line": 3}).envelope(t, true)
	if d["content"] != "l1\nl2\n" || d["file"] != p {
		t.Errorf("read lines 1..3 (0-based, exclusive): %q", d["content"])
	}
	ts.post("/v1/file/write", map[string]any{"file": p, "content": "l4", "append": true, "trailing_newline": true}).envelope(t, true)
	d = ts.post("/v1/file/read", map[string]any{"file": p, "start_line": 4}).envelope(t, true)
	if d["content"] != "l4\n" {
		t.Errorf("append: %q", d["content"])
	}
	bin := filepath.Join(ts.ws, "b.bin")
	ts.post("/v1/file/write", map[string]any{"file": bin, "content": base64.StdEncoding.EncodeToString([]byte{0, 255, 1}), "encoding": "base64"}).envelope(t, true)
	if b, _ := os.ReadFile(bin); !bytes.Equal(b, []byte{0, 255, 1}) {
		t.Errorf("base64 write: %v", b)
	}
	r := ts.post("/v1/file/write", map[string]any{"file": bin, "content": "x", "encoding": "utf-16"})
	if r.status != http.StatusUnprocessableEntity {
		t.Errorf("bad encoding: %d", r.status)
	}
}

func TestFileListFindGrep(t *testing.T) {
	ts := newTestServer(t)
	ts.writeWS("a.py", "import os\nprint('needle')\n")
	ts.writeWS("sub/b.py", "x = 1\n# needle here\ny = 2\n")
	ts.writeWS("sub/c.txt", "NEEDLE upper\n")
	ts.writeWS(".hidden", "needle\n")
	d := ts.post("/v1/file/list", map[string]any{"path": ts.ws}).envelope(t, true)
	if num(d["total_count"]) != 3 || num(d["directory_count"]) != 1 || num(d["file_count"]) != 2 {
		t.Errorf("list %v", d)
	}
	f0 := d["files"].([]any)[0].(map[string]any)
	if f0["name"] != ".hidden" || !hasNull(f0, "extension") {
		t.Errorf("dotfile %v", f0)
	}
	for _, k := range []string{"name", "path", "is_directory", "size", "modified_time", "permissions", "extension"} {
		if _, ok := f0[k]; !ok {
			t.Errorf("FileInfo has no %q", k)
		}
	}
	if !hasNull(f0, "permissions") {
		t.Errorf("permissions not null without include_permissions: %v", f0)
	}
	d = ts.post("/v1/file/list", map[string]any{"path": ts.ws, "recursive": true, "show_hidden": false, "file_types": []string{".py"}}).envelope(t, true)
	if num(d["file_count"]) != 2 {
		t.Errorf("recursive .py list %v", d)
	}
	d = ts.post("/v1/file/find", map[string]any{"path": ts.ws, "glob": "*.py"}).envelope(t, true)
	if files := d["files"].([]any); len(files) != 2 || files[0] != filepath.Join(ts.ws, "a.py") {
		t.Errorf("find %v", d)
	}
	d = ts.post("/v1/file/grep", map[string]any{"path": ts.ws, "pattern": "needle", "context_before": 1}).envelope(t, true)
	if num(d["match_count"]) != 2 || d["truncated"] != false {
		t.Fatalf("grep %v", d)
	}
	var hit map[string]any
	for _, m := range d["matches"].([]any) {
		if mm := m.(map[string]any); mm["file"] == filepath.Join(ts.ws, "sub", "b.py") {
			hit = mm
		}
	}
	if hit == nil || num(hit["line_number"]) != 2 || hit["line_content"] != "# needle here" || len(hit["context_before"].([]any)) != 1 {
		t.Errorf("grep hit %v", hit)
	}
	d = ts.post("/v1/file/grep", map[string]any{"path": ts.ws, "pattern": "needle", "case_insensitive": true, "include": "*.txt"}).envelope(t, true)
	if num(d["match_count"]) != 1 {
		t.Errorf("grep -i --include %v", d)
	}
	d = ts.post("/v1/file/grep", map[string]any{"path": ts.ws, "pattern": "needle", "max_results": 1}).envelope(t, true)
	if num(d["match_count"]) != 1 || d["truncated"] != true {
		t.Errorf("grep max_results %v", d)
	}
	d = ts.post("/v1/file/search", map[string]any{"file": filepath.Join(ts.ws, "sub", "b.py"), "regex": `^\w = \d`}).envelope(t, true)
	if nums := d["line_numbers"].([]any); len(nums) != 2 || num(nums[1]) != 3 {
		t.Errorf("search %v", d)
	}
}

func TestFileUploadDownload(t *testing.T) {
	ts := newTestServer(t)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "up.bin")
	payload := []byte{0, 1, 2, 255, 'x'}
	_, _ = fw.Write(payload)
	_ = mw.WriteField("path", filepath.Join(ts.ws, "in")+"/")
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, ts.hs.URL+"/v1/file/upload", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	dest := filepath.Join(ts.ws, "in", "up.bin")
	if res.StatusCode != http.StatusOK || !bytes.Contains(raw, []byte(`"file_path":"`+dest+`"`)) || !bytes.Contains(raw, []byte(`"file_size":5`)) {
		t.Fatalf("upload: %d %s", res.StatusCode, raw)
	}
	r := ts.do(http.MethodGet, "/v1/file/download?path="+dest, nil)
	if r.status != http.StatusOK || !bytes.Equal(r.raw, payload) || r.header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("download: %d %q %s", r.status, r.raw, r.header.Get("Content-Type"))
	}
	r = ts.do(http.MethodGet, "/v1/file/download?path="+filepath.Join(ts.ws, "nope"), nil)
	if r.status != http.StatusNotFound {
		t.Errorf("download of a missing file: %d %s", r.status, r.raw)
	}
	r = ts.do(http.MethodGet, "/v1/file/download", nil)
	if r.status != http.StatusUnprocessableEntity {
		t.Errorf("download without path: %d", r.status)
	}
}
