package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"github.com/sandgate/sandgate/executors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// config is sandboxd's whole configuration.
type config struct {
	APIKey    string
	Workspace string
	Home      string
	// Path is the PATH of commands.
	Path string
	// Lang is the LANG of commands.
	Lang string
	// Chromium is the browser binary.
	Chromium string
	// CodeDir holds the program files of the gateway's runs (aiowire
	// RunExtension.Program). Default executors.CodeDir, where every backend
	// puts them; only a sandboxd run outside its container (the client's
	// own tests) names another.
	CodeDir string
	// AwaitKey: serve without a key until POST /v1/claim sets one
	// (claim.go).
	AwaitKey bool
	// Contained enables the orphan sweep when a run is killed: only sound
	// when sandboxd shares its PID namespace with nothing but its own runs.
	Contained bool
	// MaxBashSessions bounds /v1/bash sessions; the oldest idle one is
	// closed to make room.
	MaxBashSessions int
	// RetainBytes bounds the output kept per stream of one command.
	RetainBytes int
	// WaitDelay bounds how long a finished command's output pipes may stay
	// open (held by a detached child) before they are closed.
	WaitDelay time.Duration
	// HoldTimeout bounds how long a held run waits for its release
	// (hold.go): the gateway releases it within its write-ahead record's
	// 5 s bound or breaks the body, so only a caller that hangs meets it,
	// and its run is discarded rather than kept stopped for good.
	HoldTimeout time.Duration
	Log         *slog.Logger
}

func defaultConfig() config {
	return config{
		Workspace:       "/workspace",
		Path:            "/usr/local/bin:/usr/bin:/bin",
		Lang:            "C.UTF-8",
		Chromium:        "chromium",
		CodeDir:         executors.CodeDir,
		MaxBashSessions: 64,
		RetainBytes:     8 << 20,
		WaitDelay:       500 * time.Millisecond,
		HoldTimeout:     30 * time.Second,
		Log:             slog.New(slog.DiscardHandler),
	}
}

// server is the HTTP API. Routes are matched exactly (plus a few with one
// path parameter) so that an unknown path answers FastAPI's 404 and a known
// path with the wrong method its 405.
type server struct {
	cfg config
	// keyHash is the API key's hash; nil while a sandboxd started with
	// --await-key waits for its claim (claim.go).
	keyHash atomic.Pointer[[32]byte]
	routes  map[string]map[string]http.HandlerFunc
	jobs    *jobTable
	bash    *bashSessions
	browser *browser
	kernels *kernelTable

	infoOnce sync.Once
	info     sandboxDetail
}

func newServer(cfg config) *server {
	s := &server{cfg: cfg}
	if cfg.APIKey != "" {
		h := sha256.Sum256([]byte(cfg.APIKey))
		s.keyHash.Store(&h)
	}
	s.jobs = newJobTable(cfg)
	s.bash = newBashSessions(s)
	s.browser = &browser{cfg: cfg, jobs: s.jobs}
	s.kernels = newKernelTable(s)
	s.routes = map[string]map[string]http.HandlerFunc{
		"/v1/sandbox":               {"GET": s.handleSandbox},
		"/v1/bash/exec":             {"POST": s.handleBashExec},
		"/v1/bash/kill":             {"POST": s.handleBashKill},
		"/v1/bash/sessions":         {"GET": s.handleBashSessions},
		"/v1/bash/sessions/create":  {"POST": s.handleBashSessionCreate},
		"/v1/code/execute":          {"POST": s.handleCodeExecute},
		"/v1/browser/info":          {"GET": s.handleBrowserInfo},
		"/v1/workspace/fingerprint": {"GET": s.handleFingerprint},
	}
	return s
}

// Close kills every running command and the browser.
func (s *server) Close() {
	s.kernels.closeAll()
	s.jobs.killAll()
	s.browser.close()
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.serve(sw, r)
	// Never the headers (the API key) nor bodies (code).
	s.cfg.Log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
		"duration_ms", time.Since(start).Milliseconds())
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/claim" && r.Method == http.MethodPost && s.cfg.AwaitKey {
		s.handleClaim(w, r)
		return
	}
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"detail": "Invalid or missing API key"})
		return
	}
	path := r.URL.Path
	if strings.HasPrefix(path, "/cdp/") || path == "/cdp" {
		s.handleCDP(w, r)
		return
	}
	if h := s.match(w, r, path); h != nil {
		h(w, r)
	}
}

// match finds the handler of path and method, writing the 404 or 405 itself
// when there is none.
func (s *server) match(w http.ResponseWriter, r *http.Request, path string) http.HandlerFunc {
	methods, ok := s.routes[path]
	if !ok {
		methods = s.paramRoute(r, path)
	}
	if methods == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		return nil
	}
	h, ok := methods[r.Method]
	if !ok {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
		return nil
	}
	return h
}

// paramRoute matches the routes with one path parameter and stores it as
// the request's "id" path value.
func (s *server) paramRoute(r *http.Request, path string) map[string]http.HandlerFunc {
	if rest, ok := strings.CutPrefix(path, "/v1/bash/sessions/"); ok {
		if id, ok := strings.CutSuffix(rest, "/close"); ok && id != "" && !strings.Contains(id, "/") {
			r.SetPathValue("id", id)
			return map[string]http.HandlerFunc{"POST": s.handleBashSessionClose}
		}
		return nil
	}
	if id, ok := strings.CutPrefix(path, "/v1/jupyter/sessions/"); ok && id != "" && !strings.Contains(id, "/") {
		r.SetPathValue("id", id)
		return map[string]http.HandlerFunc{"DELETE": s.handleJupyterSessionDelete}
	}
	return nil
}

// authorized accepts X-AIO-API-Key or Authorization: Bearer. Both sides
// are hashed first, so the comparison takes the same time whatever the
// length of the presented key.
func (s *server) authorized(r *http.Request) bool {
	key, want := presentedKey(r), s.keyHash.Load()
	if key == "" || want == nil {
		return false
	}
	h := sha256.Sum256([]byte(key))
	return subtle.ConstantTimeCompare(h[:], want[:]) == 1
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Flush and Unwrap keep streaming and hijacking (the CDP WebSocket proxy)
// working through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
