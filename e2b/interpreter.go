package e2b

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/manager"
)

// The code interpreter's /execute and /contexts (research/e2b-compat.md
// §3.7). A cell is a stateful python run (manager.RunRequest.Stateful) in
// the session's IPython kernel, through the whole pipeline; its output
// streams as NDJSON lines, its MIME bundles become E2B results, and an
// exception becomes the execution's error (which the SDK does not throw,
// so tool loops show it to the model). A refused cell is an error too,
// named after sandgate's code (PolicyDenied, ApprovalDenied, ...) with
// the policy's reasons as its value.
//
// A sandgate session has one kernel, so contexts are names for it: every
// context runs in the same kernel and shares its variables (E2B gives
// each context a kernel of its own). Only python is served.

// executeBody is POST /execute.
type executeBody struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// mimeKeys maps a bundle's MIME types to E2B's result fields; any other
// type keeps its MIME name as its key (the SDK puts it in extra).
var mimeKeys = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// resultOf is one bundle as a result line.
func resultOf(b executors.Bundle, main bool) map[string]any {
	out := map[string]any{"type": "result", "is_main_result": main}
	for mt, v := range b {
		k, ok := mimeKeys[mt]
		if !ok {
			k = mt
		}
		out[k] = v
	}
	return out
}

// isPicture reports whether a bundle is a figure: display_data, never a
// cell's value.
func isPicture(b executors.Bundle) bool {
	for mt := range b {
		if strings.HasPrefix(mt, "image/") {
			return true
		}
	}
	return false
}

// errLine is the last line of a Python traceback: "Name: value" or
// "Name".
var errLine = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_.]*)(?::\s?(.*))?$`)

// cellError reads a failed cell's exception from its traceback, which the
// kernel wrote to stderr: its last line names it.
func cellError(stderr string) (name, value string) {
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			continue
		}
		if m := errLine.FindStringSubmatch(l); m != nil {
			return m[1], m[2]
		}
		return "Error", l
	}
	return "Error", "the cell failed"
}

// errorName is an error code as an exception name: policy_denied is
// PolicyDenied.
func errorName(code errcode.Code) string {
	var b strings.Builder
	for part := range strings.SplitSeq(string(code), "_") {
		if part == "" {
			continue
		}
		r := []rune(part)
		b.WriteRune(unicode.ToUpper(r[0]))
		b.WriteString(string(r[1:]))
	}
	return b.String()
}

// ndjson writes the /execute stream: one JSON object per line, each
// flushed, a keepalive line while nothing else comes.
type ndjson struct {
	mu  sync.Mutex
	sw  *streamWriter // only for its deadline and flushing
	enc *json.Encoder
	ok  bool
}

func (s *Server) newNDJSON(w http.ResponseWriter) *ndjson {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	n := &ndjson{sw: newStreamWriter(w, s.cfg.WriteTimeout), enc: json.NewEncoder(w), ok: true}
	n.sw.started = true
	n.flush()
	return n
}

func (n *ndjson) line(v any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.ok {
		return
	}
	_ = n.sw.rc.SetWriteDeadline(time.Now().Add(n.sw.timeout))
	if err := n.enc.Encode(v); err != nil {
		n.ok = false
		return
	}
	n.flushLocked()
}

func (n *ndjson) flush() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.flushLocked()
}

func (n *ndjson) flushLocked() {
	if err := n.sw.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		n.ok = false
	}
}

// text holds back an incomplete UTF-8 sequence at a chunk's end for the
// next one: JSON strings carry characters.
type text struct{ held []byte }

func (t *text) take(p []byte) string {
	data := append(t.held, p...)
	whole := output.TrimRune(data)
	t.held = append([]byte(nil), data[len(whole):]...)
	return string(whole)
}

// execute serves POST /execute.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	sb, status, msg := s.sandboxOf(r, true)
	if sb == nil {
		http.Error(w, msg, status)
		return
	}
	r = sandboxContext(r, sb)
	var body executeBody
	if err := decodeBody(r, &body); err != nil {
		http.Error(w, "the body is not valid JSON for /execute", http.StatusBadRequest)
		return
	}
	switch {
	case body.ContextID != "" && body.Language != "":
		http.Error(w, "give context_id or language, not both", http.StatusBadRequest)
		return
	case body.Language != "" && body.Language != "python" && body.Language != "python3":
		http.Error(w, "only python is served: the sandbox's kernel is IPython", http.StatusBadRequest)
		return
	case len(body.EnvVars) > 0:
		http.Error(w, "env_vars are not served: set them in the code (os.environ)", http.StatusBadRequest)
		return
	}
	sb.mu.Lock()
	_, known := sb.contexts[body.ContextID]
	if body.ContextID == "" {
		known = true
	}
	sb.cells++
	count := sb.cells
	sb.mu.Unlock()
	if !known {
		http.Error(w, "context "+manager.Printable(body.ContextID, 64)+" not found", http.StatusNotFound)
		return
	}
	out := s.newNDJSON(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var texts [2]text
	var sent [2]int
	var mu sync.Mutex
	req := manager.RunRequest{
		RequestID: manager.RequestIDFrom(ctx), Kind: manager.KindRunCode, Principal: sb.principal, SessionID: sb.id,
		Language: "python", Code: body.Code, Stateful: true, Via: sb.via(),
		OnOutput: func(c output.Chunk) {
			mu.Lock()
			sent[c.Stream] += len(c.Data)
			t := texts[c.Stream].take(c.Data)
			mu.Unlock()
			if t != "" {
				out.line(map[string]any{"type": c.Stream.String(), "text": t, "timestamp": time.Now().UTC()})
			}
		},
	}
	done := make(chan struct{})
	var res *manager.RunResult
	var err error
	go func() {
		defer close(done)
		res, err = s.runSafely(ctx, req)
	}()
	tick := time.NewTicker(s.cfg.Keepalive)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			out.line(map[string]string{"type": "keepalive"})
		}
	}
	out.line(map[string]any{"type": "number_of_executions", "execution_count": count})
	if err != nil {
		code, _, _ := errcode.Of(err)
		out.line(map[string]any{"type": "error", "name": errorName(code), "value": refusal(ctx, err), "traceback": ""})
		out.line(map[string]string{"type": "end_of_execution"})
		return
	}
	mu.Lock()
	for i, full := range []string{res.Result.Stdout, res.Result.Stderr} {
		rest := ""
		if len(full) > sent[i] {
			rest = full[sent[i]:]
		}
		t := string(texts[i].held) + rest
		if t != "" {
			out.line(map[string]any{"type": output.Stream(i).String(), "text": t, "timestamp": time.Now().UTC()})
		}
	}
	mu.Unlock()
	if cell := res.Result.Cell; cell != nil {
		for i, b := range cell.Results {
			out.line(resultOf(b, i == len(cell.Results)-1 && !isPicture(b)))
		}
	}
	switch {
	case res.Result.TimedOut:
		out.line(map[string]any{"type": "error", "name": "TimeoutError", "value": "the cell was interrupted at its time limit", "traceback": ""})
	case res.Result.ExitCode != 0:
		name, value := cellError(res.Result.Stderr)
		out.line(map[string]any{"type": "error", "name": name, "value": value, "traceback": res.Result.Stderr})
	}
	out.line(map[string]string{"type": "end_of_execution"})
}

// contextBody is POST /contexts.
type contextBody struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	sb, status, msg := s.sandboxOf(r, true)
	if sb == nil {
		http.Error(w, msg, status)
		return
	}
	sb.mu.Lock()
	out := make([]codeContext, 0, len(sb.contexts))
	for _, c := range sb.contexts {
		out = append(out, c)
	}
	sb.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	writeJSON(w, http.StatusOK, out)
}

// maxContexts bounds a sandbox's context names.
const maxContexts = 64

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	sb, status, msg := s.sandboxOf(r, true)
	if sb == nil {
		http.Error(w, msg, status)
		return
	}
	var body contextBody
	if err := decodeBody(r, &body); err != nil {
		http.Error(w, "the body is not valid JSON for /contexts", http.StatusBadRequest)
		return
	}
	if body.Language != "" && body.Language != "python" && body.Language != "python3" {
		http.Error(w, "only python is served: the sandbox's kernel is IPython", http.StatusBadRequest)
		return
	}
	if body.Cwd == "" {
		body.Cwd = homeDir
	}
	if _, _, ok := toWorkspace(body.Cwd); !ok {
		http.Error(w, "cwd: "+errOutside, http.StatusBadRequest)
		return
	}
	c := codeContext{ID: strings.ToLower(rand.Text()[:16]), Language: "python", Cwd: manager.Printable(body.Cwd, 256)}
	sb.mu.Lock()
	if len(sb.contexts) >= maxContexts {
		sb.mu.Unlock()
		http.Error(w, "too many contexts", http.StatusTooManyRequests)
		return
	}
	sb.contexts[c.ID] = c
	sb.mu.Unlock()
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request) {
	sb, status, msg := s.sandboxOf(r, true)
	if sb == nil {
		http.Error(w, msg, status)
		return
	}
	id := r.PathValue("id")
	sb.mu.Lock()
	_, ok := sb.contexts[id]
	delete(sb.contexts, id)
	sb.mu.Unlock()
	if !ok {
		http.Error(w, "context not found", http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// restartContext restarts the session's kernel (every context's: they
// share it), through the manager, which audits it.
func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	sb, status, msg := s.sandboxOf(r, true)
	if sb == nil {
		http.Error(w, msg, status)
		return
	}
	r = sandboxContext(r, sb)
	sb.mu.Lock()
	_, ok := sb.contexts[r.PathValue("id")]
	sb.mu.Unlock()
	if !ok {
		http.Error(w, "context not found", http.StatusNotFound)
		return
	}
	if _, err := s.deps.Manager.RestartKernel(r.Context(), sb.principal, sb.id); err != nil {
		_, st, m := errcode.Of(err)
		http.Error(w, m, st)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
