package daytona

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// Config tunes the front end.
type Config struct {
	// PublicURL is the gateway's base URL as the SDK reaches it (behind a
	// proxy), for the toolbox URL a sandbox names; empty derives it from
	// each request's Host.
	PublicURL string
}

// Deps are the collaborators, wired in main.
type Deps struct {
	Manager *manager.Manager
	Logger  *slog.Logger
	// Fleet routes a sandbox's toolbox calls and its delete to the
	// replica serving its session; nil serves every session here.
	Fleet Fleet
}

// Server is the front end. api mounts its routes (Routes).
type Server struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
}

// New builds the front end.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Manager == nil {
		return nil, errors.New("daytona: a manager is required")
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("daytona: public_url %q is not an http(s) base URL", cfg.PublicURL)
		}
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Prefix is where the front end lives on the gateway's listener: the
// SDK's apiUrl is http(s)://<gateway>/daytona.
const Prefix = "/daytona"

// toolboxPrefix is where a sandbox's toolbox is: the SDK calls
// <toolboxProxyUrl>/<sandbox id>/...
const toolboxPrefix = Prefix + "/toolbox"

// frontEnd names this front end in the sessions it creates and in audit.
const frontEnd = "daytona"

// Routes calls mount for each route. Every route carries the SDK's API
// key as a bearer token, which the mounting front end (api) authenticates
// first (an agent token), handing the caller on with
// manager.WithPrincipal, and whose refusals it answers with WriteError.
func (s *Server) Routes(mount func(pattern string, h http.Handler)) {
	h := func(pattern string, f func(http.ResponseWriter, *http.Request, manager.Principal) error) {
		mount(pattern, s.handler(f))
	}
	h("POST "+Prefix+"/sandbox", s.createSandbox)
	h("GET "+Prefix+"/sandbox", s.listSandboxes)
	h("GET "+Prefix+"/sandbox/{id}", s.getSandbox)
	h("DELETE "+Prefix+"/sandbox/{id}", s.deleteSandbox)
	h("GET "+Prefix+"/sandbox/{id}/toolbox-proxy-url", s.toolboxProxyURL)

	tb := func(pattern string, f func(http.ResponseWriter, *http.Request, *sandbox) error) {
		method, path, _ := strings.Cut(pattern, " ")
		mount(method+" "+toolboxPrefix+"/{id}"+path, s.handler(s.toolbox(f)))
	}
	tb("GET /user-home-dir", s.homeDir)
	tb("GET /work-dir", s.homeDir)
	tb("POST /process/execute", s.execute)
	tb("POST /process/code-run", s.codeRun)
	tb("GET /files", s.listFiles)
	tb("DELETE /files", s.deleteFile)
	tb("POST /files/folder", s.createFolder)
	tb("GET /files/info", s.fileInfo)
	tb("GET /files/download", s.downloadFile)
	tb("POST /files/bulk-download", s.bulkDownload)
	tb("POST /files/bulk-upload", s.bulkUpload)
}

// BodyLimit is the body cap api puts on r when it is an upload: the
// workspace's file-size limit times the files one upload may carry, plus
// room for the multipart framing; 0 for every other request (api's own
// cap applies).
func (s *Server) BodyLimit(r *http.Request) int64 {
	if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, toolboxPrefix+"/") &&
		strings.HasSuffix(r.URL.Path, "/files/bulk-upload") {
		return s.deps.Manager.FileLimits().MaxFileBytes*maxUploadFiles + 1<<20
	}
	return 0
}

// apiError is Daytona's error body: the SDK shows message, picks its
// error class by the HTTP status (400 DaytonaValidationError, 401
// DaytonaAuthenticationError, 403 DaytonaAuthorizationError, 404
// DaytonaNotFoundError, 409, 429, 5xx ...), and keeps code as the
// error's code: sandgate's stable error code (policy_denied, ...).
type apiError struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
	Code       string `json:"code"`
	Error      string `json:"error"`
}

// WriteError answers a request api refused (401, 403) or this package
// failed, in Daytona's error shape. The message is sandgate's code,
// errcode's client-safe message, the policy's reasons when there are,
// and the request id; internal text never reaches the client.
func (s *Server) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	code, status, _ := errcode.Of(err)
	if status >= 500 && code != errcode.InsufficientStorage {
		s.log.ErrorContext(r.Context(), "daytona request failed", "request_id", manager.RequestIDFrom(r.Context()),
			"status", status, "err", err)
	}
	writeJSON(w, status, apiError{StatusCode: status, Message: refusal(r, err), Code: string(code), Error: http.StatusText(status)})
}

// refusal is err as the SDK's error message carries it: the stable code,
// errcode's message, the fields of a validation error, the policy's
// reasons and the request id.
func refusal(r *http.Request, err error) string {
	code, _, msg := errcode.Of(err)
	if code == errcode.Unauthorized {
		msg = "a valid API key is required: an agent token of the gateway, as the SDK's apiKey (DAYTONA_API_KEY)"
	}
	var invalid *errcode.ValidationError
	if errors.As(err, &invalid) {
		for _, f := range invalid.Fields {
			msg += "; " + f.Field + ": " + f.Message
		}
	}
	return fmt.Sprintf("%s: %s%s (request %s)", code, msg, reasonsOf(err), manager.RequestIDFrom(r.Context()))
}

// reasonsOf is ": " and the policy's enforced reasons of a refusal, or "".
func reasonsOf(err error) string {
	var denied *manager.DeniedError
	if !errors.As(err, &denied) || len(denied.Reasons) == 0 {
		return ""
	}
	parts := make([]string, 0, len(denied.Reasons))
	for _, r := range denied.Reasons {
		if r.Enforced() {
			parts = append(parts, r.Message+" ("+r.Code+")")
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, "; ")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

// handler hands a handler the caller api authenticated, names the front
// end for the manager's audit, and renders its error.
func (s *Server) handler(h func(http.ResponseWriter, *http.Request, manager.Principal) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := manager.PrincipalFrom(r.Context())
		if !ok {
			s.WriteError(w, r, errcode.New(errcode.Unauthorized, "unauthorized"))
			return
		}
		r = r.WithContext(manager.WithFrontEnd(r.Context(), frontEnd))
		if err := h(w, r, p); err != nil {
			s.WriteError(w, r, err)
		}
	})
}

// sandbox is the sandbox a toolbox request names, checked to be a live
// Daytona sandbox of the caller's tenant.
type sandbox struct {
	id        string
	principal manager.Principal
	// via is how the approval page names the channel.
	via string
}

// toolbox resolves the sandbox of a toolbox route ({id}) for the caller:
// a session of its tenant that this front end created and that is live;
// anything else is not found, and nothing is created (a run in a session
// that does not exist would create it).
func (s *Server) toolbox(h func(http.ResponseWriter, *http.Request, *sandbox) error) func(http.ResponseWriter, *http.Request, manager.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
		info, err := s.session(r, p, r.PathValue("id"))
		if err != nil {
			return err
		}
		handled, r, err := s.route(w, r, info)
		if err != nil || handled {
			return err
		}
		return h(w, r, &sandbox{id: info.ID, principal: p, via: via(r)})
	}
}

// via names the SDK as its requests introduce it ("Daytona SDK
// (sdk-typescript 0.218.0)"), for the approver.
func via(r *http.Request) string {
	src, ver := manager.Printable(r.Header.Get("X-Daytona-Source"), 48), manager.Printable(r.Header.Get("X-Daytona-SDK-Version"), 32)
	if src == "" {
		return "Daytona SDK"
	}
	return strings.TrimSpace("Daytona SDK (" + src + " " + ver + ")")
}
