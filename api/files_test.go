package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// fileURL is a file endpoint of session sid with query parameters given
// as name, value pairs, each encoded once.
func fileURL(sid, endpoint string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u := "/v1/sessions/" + sid + "/files"
	if endpoint != "" {
		u += "/" + endpoint
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// rawPut sends body with no Content-Length (chunked), which e.do cannot.
func (e *env) rawPut(u string, body io.Reader) resp {
	e.t.Helper()
	req, err := http.NewRequest("PUT", e.srv.URL+u, io.MultiReader(body)) // hides the length
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+agentTok)
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{status: res.StatusCode, header: res.Header, raw: raw}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(raw, &r.body)
	}
	return r
}

func TestFileEndpoints(t *testing.T) {
	e := newEnv(t, envOpts{})
	put := func(p, body string, kv ...string) resp {
		return e.do("PUT", fileURL("s1", "content", append([]string{"path", p}, kv...)...), agentTok, []byte(body))
	}
	r := put("/workspace/src/a.txt", "alpha\nbeta\nbeta\n")
	if r.status != 201 || r.body["path"] != "/workspace/src/a.txt" || r.body["size"] != 16.0 || r.body["created"] != true {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	if r = put("src/a.txt", "alpha\nbeta\nbeta\n"); r.status != 200 || r.body["created"] != false {
		t.Fatalf("overwrite: %d %s", r.status, r.raw)
	}
	if r = put("src/a.txt", "x", "mode", "create"); r.status != 409 || r.errCode() != "conflict" {
		t.Fatalf("create over an existing file: %d %s", r.status, r.raw)
	}
	if r = put("src/a.txt", "gamma\n", "mode", "append"); r.status != 200 || r.body["size"] != 22.0 || r.body["written"] != 6.0 {
		t.Fatalf("append: %d %s", r.status, r.raw)
	}
	if r = put("src/a.txt", "x", "mode", "truncate"); r.status != 400 || r.errField(0) != "mode" {
		t.Fatalf("bad mode: %d %s", r.status, r.raw)
	}

	r = e.do("GET", fileURL("s1", "content", "path", "src/a.txt"), agentTok, nil)
	if r.status != 200 || string(r.raw) != "alpha\nbeta\nbeta\ngamma\n" || r.header.Get("Content-Type") != "application/octet-stream" ||
		r.header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(r.header.Get("Content-Disposition"), `filename=a.txt`) {
		t.Fatalf("get: %d %q %v", r.status, r.raw, r.header)
	}
	r = e.do("GET", fileURL("s1", "read", "path", "src/a.txt", "offset", "1", "limit", "2"), agentTok, nil)
	if r.status != 200 || r.body["content"] != "     2\tbeta\n     3\tbeta" || r.body["total_lines"] != 4.0 ||
		r.body["truncated"] != false || r.body["next_offset"] != 3.0 {
		t.Fatalf("read: %d %s", r.status, r.raw)
	}
	put("empty.txt", "")
	if r = e.do("GET", fileURL("s1", "read", "path", "empty.txt"), agentTok, nil); r.body["content"] != workspace.EmptyFileMessage {
		t.Fatalf("read empty: %s", r.raw)
	}
	put("blob.bin", "\x00\x01\x02")
	if r = e.do("GET", fileURL("s1", "read", "path", "blob.bin"), agentTok, nil); r.status != 422 || r.errCode() != "binary_file" {
		t.Fatalf("read binary: %d %s", r.status, r.raw)
	}
	if r = e.do("GET", fileURL("s1", "content", "path", "blob.bin"), agentTok, nil); r.status != 200 || string(r.raw) != "\x00\x01\x02" {
		t.Fatalf("raw get of a binary file: %d %q", r.status, r.raw)
	}

	edit := func(body map[string]any) resp { return e.do("POST", "/v1/sessions/s1/files/edit", agentTok, body) }
	if r = edit(map[string]any{"path": "src/a.txt", "old": "alpha", "new": "ALPHA"}); r.status != 200 || r.body["occurrences"] != 1.0 {
		t.Fatalf("edit: %d %s", r.status, r.raw)
	}
	if r = edit(map[string]any{"path": "src/a.txt", "old": "beta", "new": "B"}); r.status != 409 || r.errCode() != "edit_ambiguous" {
		t.Fatalf("ambiguous edit: %d %s", r.status, r.raw)
	}
	if r = edit(map[string]any{"path": "src/a.txt", "old": "delta", "new": "D"}); r.status != 409 || r.errCode() != "edit_no_match" {
		t.Fatalf("edit without match: %d %s", r.status, r.raw)
	}
	if r = edit(map[string]any{"path": "src/a.txt", "old": "beta", "new": "B", "replace_all": true}); r.status != 200 || r.body["occurrences"] != 2.0 {
		t.Fatalf("replace_all: %d %s", r.status, r.raw)
	}
	if r = edit(map[string]any{"path": "src/a.txt", "old": "B"}); r.status != 400 || r.errField(0) != "new" {
		t.Fatalf("edit without new: %d %s", r.status, r.raw)
	}
	if r = edit(map[string]any{"path": "src/a.txt", "old": "B", "new": "", "extra": 1}); r.status != 400 || r.errField(0) != "extra" {
		t.Fatalf("edit with an unknown field: %d %s", r.status, r.raw)
	}

	r = e.do("GET", fileURL("s1", "list", "depth", "2"), agentTok, nil)
	if r.status != 200 || r.body["path"] != "/workspace" || r.body["truncated"] != false || !strings.Contains(string(r.raw), `"path":"/workspace/src/a.txt","type":"file","size":16`) {
		t.Fatalf("list: %d %s", r.status, r.raw)
	}
	r = e.do("GET", fileURL("s1", "glob", "pattern", "**/*.txt"), agentTok, nil)
	if r.status != 200 || len(r.body["entries"].([]any)) != 2 {
		t.Fatalf("glob: %d %s", r.status, r.raw)
	}
	r = e.do("GET", fileURL("s1", "grep", "pattern", "gam+a", "literal", "false", "glob", "*.txt"), agentTok, nil)
	if r.status != 200 || !strings.Contains(string(r.raw), `{"path":"/workspace/src/a.txt","line":4,"text":"gamma"}`) {
		t.Fatalf("grep: %d %s", r.status, r.raw)
	}
	if r = e.do("GET", fileURL("s1", "grep", "pattern", "("+"", "literal", "false"), agentTok, nil); r.status != 400 || r.errCode() != "invalid_request" {
		t.Fatalf("bad regex: %d %s", r.status, r.raw)
	}
	if r = e.do("DELETE", fileURL("s1", "", "path", "src"), agentTok, nil); r.status != 409 {
		t.Fatalf("delete a non-empty dir: %d %s", r.status, r.raw)
	}
	if r = e.do("DELETE", fileURL("s1", "", "path", "src", "recursive", "true"), agentTok, nil); r.status != 200 || r.body["deleted"] != true {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	if r = e.do("GET", fileURL("s1", "read", "path", "src/a.txt"), agentTok, nil); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("read after delete: %d %s", r.status, r.raw)
	}

	// Every operation above was audited with the path as code sees it.
	kinds := map[string]int{}
	for _, rec := range e.auditRecords("s1") {
		kinds[rec.Kind]++
		if rec.Path != "" && !strings.HasPrefix(rec.Path, "/workspace") {
			t.Errorf("audit path %q", rec.Path)
		}
		if strings.Contains(rec.Path, e.dataDir) {
			t.Errorf("host path in the audit: %+v", rec)
		}
	}
	for _, k := range []string{"file.write", "file.get", "file.read", "file.edit", "file.list", "file.glob", "file.grep", "file.delete"} {
		if kinds[k] == 0 {
			t.Errorf("no %s record: %v", k, kinds)
		}
	}
	if strings.Contains(string(mustJSON(t, e.auditRecords("s1"))), e.dataDir) {
		t.Error("the host path reached the audit log")
	}
}

func TestFileEndpointsRequestChecks(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, c := range []struct {
		method, url, tok string
		status           int
		code, field      string
	}{
		{"GET", fileURL("s1", "read", "path", "a"), approverTok, 403, "forbidden", ""},
		{"GET", fileURL("s1", "read", "path", "a"), adminTok, 403, "forbidden", ""},
		{"PUT", fileURL("s1", "content", "path", "a"), "", 401, "unauthorized", ""},
		{"GET", fileURL("s1", "read"), agentTok, 400, "invalid_request", "path"},
		{"GET", fileURL("s1", "read", "path", "a", "pth", "b"), agentTok, 400, "invalid_request", "pth"},
		{"GET", "/v1/sessions/s1/files/read?path=a&path=../b", agentTok, 400, "invalid_request", "path"},
		{"GET", "/v1/sessions/s1/files/read?path=%zz", agentTok, 400, "invalid_request", "query"},
		{"GET", "/v1/sessions/s1/files/read?path=a;b", agentTok, 400, "invalid_request", "query"},
		{"GET", fileURL("s1", "read", "path", "a", "offset", "-1"), agentTok, 400, "invalid_request", "offset"},
		{"GET", fileURL("s1", "read", "path", "a", "limit", "0"), agentTok, 400, "invalid_request", "limit"},
		{"GET", fileURL("s1", "list", "depth", "x"), agentTok, 400, "invalid_request", "depth"},
		{"GET", fileURL("s1", "grep", "pattern", "x", "literal", "maybe"), agentTok, 400, "invalid_request", "literal"},
		{"GET", fileURL("s1", "glob"), agentTok, 400, "invalid_request", "pattern"},
		{"DELETE", fileURL("s1", ""), agentTok, 400, "invalid_request", "path"},
		{"POST", fileURL("s1", "content", "path", "a"), agentTok, 405, "method_not_allowed", ""},
		{"GET", fileURL("never", "read", "path", "a"), agentTok, 404, "not_found", ""},
		{"GET", "/v1/sessions/..%2fs1/files/read?path=a", agentTok, 400, "invalid_request", ""},
		{"GET", "/v1/sessions/%2e%2e/files/read?path=a", agentTok, 400, "invalid_request", ""},
	} {
		r := e.do(c.method, c.url, c.tok, nil)
		if r.status != c.status || r.errCode() != c.code || (c.field != "" && r.errField(0) != c.field) {
			t.Errorf("%s %s: %d %s", c.method, c.url, r.status, r.raw)
		}
	}
}

// TestUploadLimits: a raw upload is bounded by the file-size limit, not by
// the JSON body cap, with or without a Content-Length.
func TestUploadLimits(t *testing.T) {
	e := newEnv(t, envOpts{maxBody: 1 << 20})
	limit := workspace.DefaultMaxFileBytes
	big := bytes.Repeat([]byte("x"), 3<<20) // over the JSON cap, under the file limit
	if r := e.do("PUT", fileURL("s1", "content", "path", "big.bin"), agentTok, big); r.status != 201 || r.body["size"] != float64(len(big)) {
		t.Fatalf("3 MiB upload: %d %s", r.status, r.raw)
	}
	if r := e.rawPut(fileURL("s1", "content", "path", "big2.bin"), bytes.NewReader(big)); r.status != 201 {
		t.Fatalf("3 MiB chunked upload: %d %s", r.status, r.raw)
	}
	over := make([]byte, limit+1)
	if r := e.do("PUT", fileURL("s1", "content", "path", "big.bin"), agentTok, over); r.status != 413 || r.errCode() != "file_too_large" {
		t.Fatalf("over the limit: %d %s", r.status, r.raw)
	}
	if r := e.rawPut(fileURL("s1", "content", "path", "big.bin"), bytes.NewReader(over)); r.status != 413 || r.errCode() != "file_too_large" {
		t.Fatalf("over the limit, chunked: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", fileURL("s1", "content", "path", "big.bin"), agentTok, nil); r.status != 200 || len(r.raw) != len(big) {
		t.Fatalf("a refused upload changed the file: %d %d", r.status, len(r.raw))
	}
	// The JSON endpoints keep the JSON cap.
	huge := map[string]any{"path": "big.bin", "old": strings.Repeat("o", 1<<20), "new": ""}
	if r := e.do("POST", "/v1/sessions/s1/files/edit", agentTok, huge); r.status != 413 || r.errCode() != "payload_too_large" {
		t.Fatalf("edit over the JSON cap: %d %.200s", r.status, r.raw)
	}
}

// plantHostile creates in session sid the links hostile_paths.txt relies
// on; it returns the placeholder values.
func plantHostile(t *testing.T, e *env, sid, otherSid string) *strings.Replacer {
	t.Helper()
	ctx := context.Background()
	d, err := e.ws.Ensure(ctx, agentKey(sid))
	if err != nil {
		t.Fatal(err)
	}
	od, err := e.ws.Ensure(ctx, agentKey(otherSid))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dataDir, "outside")
	for _, err := range []error{
		os.MkdirAll(out, 0o755), os.WriteFile(filepath.Join(out, "canary.txt"), []byte(outsideCanary), 0o644),
		os.WriteFile(filepath.Join(od.Path, "secret.txt"), []byte(otherSecret), 0o600),
		os.MkdirAll(filepath.Join(d.Path, "sub"), 0o755), os.MkdirAll(filepath.Join(d.Path, "deep"), 0o755),
		os.WriteFile(filepath.Join(d.Path, "sub", "file.txt"), []byte("inside"), 0o644),
		syscall.Mkfifo(filepath.Join(d.Path, "fifo"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"etc": "/etc", "proc": "/proc/self", "other": od.Path, "rel_other": "../" + otherSid,
		"up": "..", "deep/up2": "../../", "out": out, "out_rel": "../../outside",
		"abs_self": filepath.Join(d.Path, "sub"), "inner": "sub", "chain1": "chain2", "chain2": "out_rel",
		"inner_up": "sub/../..", "loop1": "loop2", "loop2": "loop1",
	} {
		if err := os.Symlink(target, filepath.Join(d.Path, link)); err != nil {
			t.Fatal(err)
		}
	}
	return strings.NewReplacer("$SELF", d.Path, "$OTHER", od.Path, "$OUT", out,
		"$LONG_PATH", strings.Repeat("a/", 2049)+"x", "$LONG_NAME", strings.Repeat("n", 256),
		"$DEEP_PATH", strings.Repeat("d/", workspace.MaxPathDepth)+"x")
}

const (
	outsideCanary = "sg-canary-outside-4b1d"
	otherSecret   = "sg-secret-of-other-session-77e2"
)

type hostileLine struct {
	expect, ops, path, rel string
}

// loadHostileLines reads the workspace package's corpus.
func loadHostileLines(t *testing.T) []hostileLine {
	t.Helper()
	fh, err := os.Open("../workspace/testdata/hostile_paths.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []hostileLine
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var c hostileLine
		var rest string
		c.expect, rest, _ = strings.Cut(line, " ")
		c.ops, rest, _ = strings.Cut(strings.TrimSpace(rest), " ")
		rest = strings.TrimSpace(rest)
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		c.path, _ = strconv.Unquote(q)
		if rest = strings.TrimSpace(rest[len(q):]); rest != "" {
			c.rel, _ = strconv.Unquote(rest)
		}
		out = append(out, c)
	}
	return out
}

// TestHostilePathsOverHTTP sends the workspace corpus through the API,
// each path encoded once, plus query strings encoded by hand: percent
// sequences that only a second decoding would turn into "..", "/" or "\".
// Nothing outside the session's workspace may be returned or changed.
func TestHostilePathsOverHTTP(t *testing.T) {
	e := newEnv(t, envOpts{})
	rep := plantHostile(t, e, "hs", "hs-other")
	outsideBefore := snapshotOutside(t, e)
	check := func(t *testing.T, what string, r resp, traversal bool) {
		t.Helper()
		switch {
		case traversal && (r.status != 400 || r.errCode() != "path_traversal"):
			t.Errorf("%s: want path_traversal, got %d %.300s", what, r.status, r.raw)
		case !traversal && r.errCode() == "path_traversal":
			t.Errorf("%s: confined path refused as traversal: %.300s", what, r.raw)
		case r.status >= 500:
			t.Errorf("%s: %d %.300s", what, r.status, r.raw)
		}
		if bytes.Contains(r.raw, []byte(outsideCanary)) || bytes.Contains(r.raw, []byte(otherSecret)) ||
			bytes.Contains(r.raw, []byte("root:x:")) || bytes.Contains(r.raw, []byte(e.dataDir)) {
			t.Errorf("%s leaked: %.300s", what, r.raw)
		}
	}
	lines := loadHostileLines(t)
	for i, c := range lines {
		p := rep.Replace(c.path)
		t.Run(fmt.Sprintf("%d_%.40q", i, c.path), func(t *testing.T) {
			trav := c.expect == "traversal"
			if strings.Contains(c.ops, "r") && p != "" {
				check(t, "read "+c.path, e.do("GET", fileURL("hs", "read", "path", p), agentTok, nil), trav)
				check(t, "get "+c.path, e.do("GET", fileURL("hs", "content", "path", p), agentTok, nil), trav)
			}
			if strings.Contains(c.ops, "w") && p != "" {
				check(t, "put "+c.path, e.do("PUT", fileURL("hs", "content", "path", p), agentTok, []byte("sg-probe")), trav)
			}
			if strings.Contains(c.ops, "l") {
				check(t, "list "+c.path, e.do("GET", fileURL("hs", "list", "path", p), agentTok, nil), trav)
			}
		})
	}
	for _, c := range []struct {
		rawPath   string // the query value as sent, already encoded
		traversal bool
		lands     string // for a write that must succeed: where, relative to the workspace
	}{
		{"%2e%2e%2fetc%2fpasswd", true, ""},
		{"%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", true, ""},
		{"..%2f..%2fetc%2fpasswd", true, ""},
		{"%2e%2e/%2e%2e/etc/passwd", true, ""},
		{"..%5c..%5cetc%5cpasswd", true, ""},
		{"a%00b", true, ""},
		{"%2fetc%2fpasswd", true, ""},
		{"%2fworkspace%2f..%2fetc%2fpasswd", true, ""},
		{"out%2fcanary.txt", true, ""},
		{"%252e%252e%252fetc%252fpasswd", false, "%2e%2e%2fetc%2fpasswd"},
		{"%252e%252e/x", false, "%2e%2e/x"},
		{"%25252e%25252e.txt", false, "%252e%252e.txt"},
		{"..%252f..%252fetc", false, "..%2f..%2fetc"},
		{"%255c..%255cx", false, "%5c..%5cx"},
		{"%c0%ae%c0%ae%2fx", false, "\xc0\xae\xc0\xae/x"},
		{"%e2%80%a4%e2%80%a4%2fx", false, "\u2024\u2024/x"},
		{"..%ef%bc%8fx", false, "..\uff0fx"},
		{"..%e2%88%95x", false, "..\u2215x"},
		{"+..+/x", false, " .. /x"},
	} {
		r := e.do("GET", "/v1/sessions/hs/files/read?path="+c.rawPath, agentTok, nil)
		check(t, "read "+c.rawPath, r, c.traversal)
		r = e.do("PUT", "/v1/sessions/hs/files/content?path="+c.rawPath, agentTok, []byte("sg-probe-raw"))
		check(t, "put "+c.rawPath, r, c.traversal)
		if c.lands != "" {
			d, _ := e.ws.Ensure(context.Background(), agentKey("hs"))
			if b, err := os.ReadFile(filepath.Join(d.Path, c.lands)); err != nil || string(b) != "sg-probe-raw" {
				t.Errorf("put %s: not at %q (%d %s): %v", c.rawPath, c.lands, r.status, r.raw, err)
			}
		}
	}
	if got := snapshotOutside(t, e); got != outsideBefore {
		t.Fatalf("outside the workspace changed:\n%s\nwas\n%s", got, outsideBefore)
	}
}

// snapshotOutside describes what must not change: the outside directory,
// the other session's workspace, /etc/passwd.
func snapshotOutside(t *testing.T, e *env) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range []string{filepath.Join(e.dataDir, "outside"), filepath.Join(e.dataDir, "workspaces", agentKey("hs-other"))} {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range es {
			c, _ := os.ReadFile(filepath.Join(dir, en.Name()))
			fmt.Fprintf(&b, "%s/%s=%q\n", dir, en.Name(), c)
		}
	}
	pw, _ := os.ReadFile("/etc/passwd")
	fmt.Fprintf(&b, "passwd=%d\n", len(pw))
	return b.String()
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParallelEditsOverHTTP: 50 concurrent edits, each with its own old
// string, all apply exactly once.
func TestParallelEditsOverHTTP(t *testing.T) {
	e := newEnv(t, envOpts{})
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "item-%02d = pending\n", i)
	}
	if r := e.do("PUT", fileURL("pe", "content", "path", "list.txt"), agentTok, []byte(b.String())); r.status != 201 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			r := e.do("POST", "/v1/sessions/pe/files/edit", agentTok, map[string]any{
				"path": "list.txt", "old": fmt.Sprintf("item-%02d = pending", i), "new": fmt.Sprintf("item-%02d = done", i)})
			if r.status != 200 || r.body["occurrences"] != 1.0 {
				t.Errorf("edit %d: %d %s", i, r.status, r.raw)
			}
		})
	}
	wg.Wait()
	r := e.do("GET", fileURL("pe", "content", "path", "list.txt"), agentTok, nil)
	for i := range 50 {
		if strings.Count(string(r.raw), fmt.Sprintf("item-%02d = done\n", i)) != 1 {
			t.Fatalf("edit %d lost:\n%s", i, r.raw)
		}
	}
	if strings.Contains(string(r.raw), "pending") {
		t.Fatalf("unapplied edits:\n%s", r.raw)
	}
}

// TestFilesSharedWithRunCode: what the API writes, code run by the
// subprocess executor sees in its workspace (its cwd, /workspace to it),
// and can change, because the API gave it to the session's uid; what the
// code writes, the API reads.
func TestFilesSharedWithRunCode(t *testing.T) {
	e := newEnv(t, envOpts{mode: "PERMISSIVE"})
	if r := e.do("PUT", fileURL("sh", "content", "path", "/workspace/data/in.txt"), agentTok, []byte("from-api\n")); r.status != 201 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	r := e.do("POST", "/v1/sessions/sh/run_code", agentTok, runCode(
		"cat data/in.txt && echo more >> data/in.txt && mkdir -p data/sub && echo from-code > data/sub/out.txt && pwd", "bash"))
	if r.status != 200 || r.body["sandbox_type"] != "subprocess" || r.body["exit_code"] != 0.0 ||
		r.body["stdout"] != "from-api\n/workspace\n" {
		t.Fatalf("run_code: %d %s", r.status, r.raw)
	}
	r = e.do("POST", "/v1/sessions/sh/run_code", agentTok, runCode("print(open('data/in.txt').read(), end='')", "python"))
	if r.status != 200 || r.body["sandbox_type"] != "subprocess" || r.body["stdout"] != "from-api\nmore\n" {
		t.Fatalf("python: %d %s", r.status, r.raw)
	}
	if r = e.do("GET", fileURL("sh", "read", "path", "data/sub/out.txt"), agentTok, nil); r.status != 200 || r.body["content"] != "     1\tfrom-code" {
		t.Fatalf("read what code wrote: %d %s", r.status, r.raw)
	}
	if r = e.do("GET", fileURL("sh", "content", "path", "data/in.txt"), agentTok, nil); r.status != 200 || string(r.raw) != "from-api\nmore\n" {
		t.Fatalf("get what code appended: %d %q", r.status, r.raw)
	}
	// Code can also replace and remove what the API made.
	if r = e.do("PUT", fileURL("sh", "content", "path", "made/by/api.txt"), agentTok, []byte("x")); r.status != 201 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	r = e.do("POST", "/v1/sessions/sh/run_code", agentTok, runCode("echo y > made/by/api.txt && rm made/by/api.txt && rmdir made/by made && echo ok", "bash"))
	if r.status != 200 || r.body["stdout"] != "ok\n" {
		t.Fatalf("code could not change the API's files: %d %s", r.status, r.raw)
	}
	if os.Geteuid() == 0 {
		d, _ := e.ws.Ensure(context.Background(), agentKey("sh"))
		fi, err := os.Stat(filepath.Join(d.Path, "data"))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != d.UID || int(st.Gid) != d.GID || d.UID == 0 {
			t.Fatalf("data/ is owned by %d:%d, the session is %d:%d", st.Uid, st.Gid, d.UID, d.GID)
		}
	}
}

// TestRaceCodeFlipsDirectoryUnderAPI: code in the session, run by the real
// subprocess executor, swaps a directory for symlinks leading out (to a
// canary directory, another session, /etc, /proc/self) and back, in a
// loop, while the API reads, writes, lists and greps under it. Nothing
// outside the workspace is ever returned or changed.
func TestRaceCodeFlipsDirectoryUnderAPI(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, envOpts{mode: "PERMISSIVE"})
	plantHostile(t, e, "hs", "hs-other") // the canary dir, the other session
	before := snapshotOutside(t, e)
	if r := e.do("PUT", fileURL("hs", "content", "path", "d/in.txt"), agentTok, []byte("sg-inside\n")); r.status != 201 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	other, _ := e.ws.Ensure(context.Background(), agentKey("hs-other"))
	// Python, so that a flip is a few system calls, not a few processes.
	// The link is renamed away rather than removed (a delete would raise the
	// risk level and route the run to docker).
	script := fmt.Sprintf(`import os, time
targets = [%q, %q, "/etc", "/proc/self", "../hs-other", "../../outside"]
end = time.time() + 4
i = 0
while time.time() < end:
    try:
        os.rename("d", "d.real")
        os.symlink(targets[i %% len(targets)], "d")
    except OSError:
        pass
    i += 1
    time.sleep(0.0003)
    if os.path.islink("d"):
        os.rename("d", "d.gone")
    elif os.path.isdir("d") and os.path.isdir("d.real"):
        os.rename("d", "d.api%%d" %% i)
    try:
        os.rename("d.real", "d")
    except OSError:
        pass
    time.sleep(0.0003)
print("flips=%%d" %% i)
`, filepath.Join(e.dataDir, "outside"), other.Path)
	done := make(chan resp, 1)
	go func() {
		done <- e.do("POST", "/v1/sessions/hs/run_code", agentTok, map[string]any{"code": script, "language": "python", "timeout_s": 30})
	}()
	leak := func(b []byte) bool {
		return bytes.Contains(b, []byte(outsideCanary)) || bytes.Contains(b, []byte(otherSecret)) ||
			bytes.Contains(b, []byte("root:x:")) || bytes.Contains(b, []byte(e.dataDir))
	}
	var ok, refused int
	var run resp
	for i := 0; ; i++ {
		select {
		case run = <-done:
		default:
		}
		if run.status != 0 {
			break
		}
		for _, u := range []struct{ method, url string }{
			{"GET", fileURL("hs", "read", "path", "d/in.txt")},
			{"GET", fileURL("hs", "content", "path", "d/canary.txt")},
			{"GET", fileURL("hs", "content", "path", "d/secret.txt")},
			{"GET", fileURL("hs", "read", "path", "d/passwd")},
			{"PUT", fileURL("hs", "content", "path", fmt.Sprintf("d/w%d.txt", i))},
			{"PUT", fileURL("hs", "content", "path", "d/canary.txt")},
			{"GET", fileURL("hs", "list", "path", "d", "depth", "2")},
			{"GET", fileURL("hs", "grep", "path", "d", "pattern", "sg-")},
			{"GET", fileURL("hs", "glob", "path", "d", "pattern", "**")},
		} {
			var body any
			if u.method == "PUT" {
				body = []byte("sg-probe")
			}
			r := e.do(u.method, u.url, agentTok, body)
			if leak(r.raw) {
				t.Fatalf("%s %s leaked: %.300s", u.method, u.url, r.raw)
			}
			if r.status >= 500 {
				t.Errorf("%s %s: %d %s", u.method, u.url, r.status, r.raw)
			}
			if r.status < 300 {
				ok++
			} else {
				refused++
			}
		}
	}
	if run.status != 200 || run.body["sandbox_type"] != "subprocess" || !strings.HasPrefix(fmt.Sprint(run.body["stdout"]), "flips=") {
		t.Fatalf("the flipping code did not run: %d %.500s", run.status, run.raw)
	}
	t.Logf("code: %s; API: %d ok, %d refused", strings.TrimSpace(fmt.Sprint(run.body["stdout"])), ok, refused)
	if ok == 0 || refused == 0 {
		t.Fatalf("no race: %d ok, %d refused", ok, refused)
	}
	if got := snapshotOutside(t, e); got != before {
		t.Fatalf("outside the workspace changed:\n%s\nwas\n%s", got, before)
	}
}

// TestCrossSessionFilesOverHTTP: session A cannot read, list, search or
// write session B's files by any path, including links A's own code
// planted.
func TestCrossSessionFilesOverHTTP(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, envOpts{mode: "PERMISSIVE"})
	if r := e.do("PUT", fileURL("sess-b", "content", "path", "secret.txt"), agentTok, []byte(otherSecret)); r.status != 201 {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	b, _ := e.ws.Ensure(context.Background(), agentKey("sess-b"))
	r := e.do("POST", "/v1/sessions/sess-a/execute", agentTok, map[string]any{
		"command": fmt.Sprintf("ln -s ../sess-b b_rel && ln -s %s b_abs && ln -s b_rel b_chain && echo planted", b.Path)})
	if r.status != 200 || r.body["output"] != "planted\n" {
		t.Fatalf("plant: %d %s", r.status, r.raw)
	}
	for _, p := range []string{
		"../sess-b/secret.txt", "/workspace/../sess-b/secret.txt", b.Path + "/secret.txt", "b_rel/secret.txt",
		"b_abs/secret.txt", "b_chain/secret.txt", "./b_rel/../../sess-b/secret.txt", "b_rel", "b_abs", "..",
	} {
		for _, u := range []struct{ method, url string }{
			{"GET", fileURL("sess-a", "read", "path", p)},
			{"GET", fileURL("sess-a", "content", "path", p)},
			{"GET", fileURL("sess-a", "list", "path", p)},
			{"GET", fileURL("sess-a", "glob", "path", p, "pattern", "*")},
			{"GET", fileURL("sess-a", "grep", "path", p, "pattern", "sg-")},
			{"PUT", fileURL("sess-a", "content", "path", p+"/pwned.txt")},
			{"POST", "/v1/sessions/sess-a/files/edit"},
		} {
			var body any
			switch u.method {
			case "PUT":
				body = []byte("pwned")
			case "POST":
				body = map[string]any{"path": p, "old": "sg", "new": "pwned", "replace_all": true}
			}
			r := e.do(u.method, u.url, agentTok, body)
			if r.status < 400 || r.status >= 500 || bytes.Contains(r.raw, []byte(otherSecret)) {
				t.Errorf("%s %s (%q): %d %.300s", u.method, u.url, p, r.status, r.raw)
			}
		}
	}
	r = e.do("GET", fileURL("sess-a", "grep", "pattern", "sg-secret"), agentTok, nil)
	if r.status != 200 || len(r.body["matches"].([]any)) != 0 {
		t.Fatalf("grep over A reached B: %s", r.raw)
	}
	if es, _ := os.ReadDir(b.Path); len(es) != 1 {
		t.Fatalf("B's workspace changed: %v", es)
	}
	if got, _ := os.ReadFile(filepath.Join(b.Path, "secret.txt")); string(got) != otherSecret {
		t.Fatalf("B's secret changed: %q", got)
	}
}

// newBenchServer is the gateway's file path (HTTP, auth, manager, audit,
// workspace) without executors, for benchmarks (newEnv wants a
// *testing.T). The audit store is SQLite (durable: one fsync per record,
// as in production) or, with durable false, in memory.
func newBenchServer(b *testing.B, durable bool) (*httptest.Server, string) {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	var st audit.Store = audit.NewMemory()
	if durable {
		db, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		st = db
	}
	ws, err := workspace.New(filepath.Join(dir, "workspaces"), workspace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: testEvalTimeout})
	if err != nil {
		b.Fatal(err)
	}
	mgr, err := manager.New(manager.Config{}, manager.Deps{Assessor: risk.NewAssessor(nil, nil), Policy: eng, Workspaces: ws, Audit: st})
	if err != nil {
		b.Fatal(err)
	}
	auth, err := NewAuth([]Token{NewToken("a", RoleAgent, agentTok)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{}, Deps{Manager: mgr, Policy: eng, Audit: st, Auth: auth, Gatherer: prometheus.NewRegistry()}))
	b.Cleanup(srv.Close)
	return srv, dir
}

// BenchmarkFileHTTP64K measures PUT and GET .../files/content of a 64 KiB
// file through the whole HTTP stack (loopback, auth, the audit record, the
// workspace) against os.WriteFile / os.ReadFile of the same bytes,
// interleaved in one loop so both see the same load. It reports
// raw-ns/op, api-ns/op and their ratio. The audit store is the durable
// SQLite one (an fsync per record, which dominates); the -memaudit
// variants use the in-memory store to show the rest.
//
//	go test -run '^$' -bench FileHTTP64K -benchtime 1000x -count 3 ./api/
func BenchmarkFileHTTP64K(b *testing.B) {
	for _, durable := range []bool{true, false} {
		suffix := ""
		if !durable {
			suffix = "-memaudit"
		}
		srv, dir := newBenchServer(b, durable)
		benchFileHTTP(b, srv, dir, suffix)
	}
}

func benchFileHTTP(b *testing.B, srv *httptest.Server, dir, suffix string) {
	data := bytes.Repeat([]byte("0123456789abcde\n"), 4096)
	raw := filepath.Join(dir, "raw.txt")
	u := srv.URL + fileURL("bench", "content", "path", "f.txt")
	do := func(method string, body []byte) error {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequest(method, u, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+agentTok)
		res, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		n, _ := io.Copy(io.Discard, res.Body)
		if res.StatusCode >= 300 || (method == "GET" && n != int64(len(data))) {
			return fmt.Errorf("%s: %d, %d bytes", method, res.StatusCode, n)
		}
		return nil
	}
	if err := do("PUT", data); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, rawOp, apiOp func() error) {
		var rawNS, apiNS time.Duration
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			t0 := time.Now()
			if err := rawOp(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := apiOp(); err != nil {
				b.Fatal(err)
			}
			rawNS += t1.Sub(t0)
			apiNS += time.Since(t1)
		}
		n := float64(b.N)
		b.ReportMetric(float64(rawNS.Nanoseconds())/n, "raw-ns/op")
		b.ReportMetric(float64(apiNS.Nanoseconds())/n, "api-ns/op")
		b.ReportMetric(float64(apiNS)/float64(rawNS), "ratio")
	}
	b.Run("write"+suffix, func(b *testing.B) {
		run(b, func() error { return os.WriteFile(raw, data, 0o644) }, func() error { return do("PUT", data) })
	})
	b.Run("read"+suffix, func(b *testing.B) {
		run(b, func() error { _, err := os.ReadFile(raw); return err }, func() error { return do("GET", nil) })
	})
}
