package e2b

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// The control plane: E2B's REST API for sandboxes, the subset the SDKs
// call (research/e2b-compat.md §3.3). A sandbox is a sandgate session of
// the caller's tenant whose id is the sandbox id, created with front end
// "e2b"; sessions other front ends created are not E2B sandboxes and are
// not found here.

// Templates maps each E2B template name sandgate serves to the runtime
// that runs it. sandgate has one runtime today, the root filesystem
// `make images` builds (images/runtime: Debian with Python 3, pandas,
// matplotlib, IPython, Node.js and the shell tools); the policy chooses
// the executor (subprocess, docker, gvisor, aio) that runs it, as for
// every other front end. "base" is the SDK's default template and
// "code-interpreter-v1" the code interpreter's. Any other name is refused
// at create with a 400 that lists these.
var Templates = map[string]string{
	"base":                "runtime",
	"code-interpreter-v1": "runtime",
	"code-interpreter":    "runtime",
}

// Constants of the answers.
const (
	// domain is every sandbox's domain: it cannot resolve (RFC 6761), so
	// a client that forgot E2B_SANDBOX_URL, and so would build
	// https://49983-<id>.<domain>, fails instead of sending its commands
	// and files to a public host.
	domain = "sandgate.invalid"
	// envdVersion is the envd version whose features this package serves:
	// 0.5.7 lets the SDK upload as application/octet-stream (both upload
	// encodings are served) and stops below the file-metadata and
	// watchDir options of 0.6.x, which are not.
	envdVersion = "0.5.7"
	clientID    = "sandgate"
	// defaultTimeout is E2B's default sandbox lifetime, for a create that
	// names none.
	defaultTimeout = 300
	// maxTimeout bounds a sandbox's lifetime, as POST /v1/sessions does.
	maxTimeout = 30 * 24 * 3600
	// labelTemplate is the session label naming the sandbox's template.
	labelTemplate = "e2b.template"
	// homeDir is the E2B user's home, where the SDK's relative paths and
	// its default cwd point (see paths.go).
	homeDir = "/home/user"
)

// createBody is NewSandbox (both POST /sandboxes and /v2/sandboxes).
type createBody struct {
	TemplateID string            `json:"templateID"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	// Timeout is the sandbox's lifetime in seconds.
	Timeout *int `json:"timeout"`
	// Options sandgate does not serve: refused when set, never ignored.
	AutoPause    *bool           `json:"autoPause"`
	Network      json.RawMessage `json:"network"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
	MCP          json.RawMessage `json:"mcp"`
	// AllowInternetAccess is accepted and not acted on: what a run may
	// reach is the egress policy's decision (DESIGN.md §9), per request.
	AllowInternetAccess *bool `json:"allow_internet_access"`
}

// sandboxView is E2B's Sandbox: what create and connect answer.
type sandboxView struct {
	SandboxID          string `json:"sandboxID"`
	TemplateID         string `json:"templateID"`
	ClientID           string `json:"clientID"`
	EnvdVersion        string `json:"envdVersion"`
	EnvdAccessToken    string `json:"envdAccessToken"`
	TrafficAccessToken string `json:"trafficAccessToken"`
	Domain             string `json:"domain"`
}

// listedView is E2B's ListedSandbox; detailView its SandboxDetail.
type listedView struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	ClientID    string            `json:"clientID"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	EnvdVersion string            `json:"envdVersion"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	State       string            `json:"state"`
	Metadata    map[string]string `json:"metadata"`
}

type detailView struct {
	listedView
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	Domain          string `json:"domain"`
}

var (
	errNotFound = errcode.New(errcode.NotFound, "the sandbox does not exist")
	errBadJSON  = errcode.New(errcode.InvalidRequest, "the body is not valid JSON for this endpoint")
)

func invalid(field, msg string) error {
	return &errcode.ValidationError{Kind: errcode.New(errcode.InvalidRequest, "the request is invalid"),
		Fields: []errcode.FieldError{{Field: field, Code: "invalid", Message: msg}}}
}

// decodeBody reads a JSON object, ignoring unknown fields as E2B's API
// does; an empty body is {}.
func decodeBody(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errcode.New(errcode.PayloadTooLarge, "the body exceeds the size limit")
		}
		return errBadJSON
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if json.Unmarshal(body, v) != nil {
		return errBadJSON
	}
	return nil
}

func (b *createBody) check() error {
	if b.TemplateID == "" {
		b.TemplateID = "base"
	}
	if _, ok := Templates[b.TemplateID]; !ok {
		names := slices.Sorted(maps.Keys(Templates))
		return invalid("templateID", fmt.Sprintf("unknown template %q: this gateway serves %s", manager.Printable(b.TemplateID, 64), strings.Join(names, ", ")))
	}
	switch {
	case b.Timeout != nil && (*b.Timeout < 0 || *b.Timeout > maxTimeout):
		return invalid("timeout", "must be 0 to 2592000 seconds")
	case b.AutoPause != nil && *b.AutoPause:
		return invalid("autoPause", "pausing at the timeout (autoPause) is not served by sandgate; pause with Sandbox.pause")
	case isSet(b.Network):
		return invalid("network", "egress is decided by the gateway's policy, not per sandbox")
	case isSet(b.VolumeMounts):
		return invalid("volumeMounts", "volumes are not served by sandgate")
	case isSet(b.MCP):
		return invalid("mcp", "the MCP gateway is not served by sandgate")
	}
	if err := checkMap("metadata", b.Metadata); err != nil {
		return err
	}
	for k := range b.EnvVars {
		if !envName.MatchString(k) {
			return invalid("envVars", "names must match [A-Za-z_][A-Za-z0-9_]*")
		}
	}
	return nil
}

func isSet(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != "{}" && s != "[]"
}

// checkMap bounds metadata as POST /v1/sessions bounds it.
func checkMap(field string, m map[string]string) error {
	if len(m) > 64 {
		return invalid(field, "at most 64 entries")
	}
	for k, v := range m {
		if k == "" || len(k) > 256 || len(v) > 256 || strings.ContainsAny(k, "=,") {
			return invalid(field, "keys are 1 to 256 bytes without '=' or ','; values at most 256 bytes")
		}
	}
	return nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// createSandbox creates the sandbox's session and registers it.
func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	var body createBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if err := body.check(); err != nil {
		return err
	}
	timeout := defaultTimeout
	if body.Timeout != nil && *body.Timeout > 0 {
		timeout = *body.Timeout
	}
	client := clientOf(r)
	id := newSandboxID()
	_, owner, err := s.deps.Manager.CreateSession(r.Context(), p, id, manager.OpenOptions{
		FrontEnd: frontEnd, Client: manager.Printable(r.UserAgent(), 128), Labels: map[string]string{labelTemplate: body.TemplateID},
		Metadata: body.Metadata, TTL: time.Duration(timeout) * time.Second,
	})
	if err != nil {
		return err
	}
	if !owner.Local {
		return manager.ErrSessionElsewhere // a fresh random id: not in a one-process gateway
	}
	sb := newSandbox(id, body.TemplateID, p, client, body.EnvVars)
	if err := s.deps.Registry.register(r.Context(), sb); err != nil {
		// No sandbox without its record: the session goes too.
		_ = s.deps.Manager.DeleteSession(manager.WithServedHere(r.Context(), sb.sessionKey), p, id, true)
		return err
	}
	writeJSON(w, http.StatusCreated, viewOf(sb))
	return nil
}

func viewOf(sb *sandbox) sandboxView {
	envd, traffic := sb.tokens()
	return sandboxView{SandboxID: sb.id, TemplateID: sb.template, ClientID: clientID, EnvdVersion: envdVersion,
		EnvdAccessToken: envd, TrafficAccessToken: traffic, Domain: domain}
}

// session is the caller's E2B sandbox id as the manager describes it;
// a session another front end made is not found.
func (s *Server) session(r *http.Request, p manager.Principal, id string) (manager.SessionInfo, error) {
	info, err := s.deps.Manager.Session(r.Context(), p, id)
	if err != nil {
		return info, err
	}
	if info.FrontEnd != frontEnd || !live(info.State) {
		return info, errNotFound
	}
	return info, nil
}

func live(state string) bool {
	return state != manager.StateExpired && state != manager.StateDeleted
}

// listedOf is a session as a listed sandbox.
func listedOf(info manager.SessionInfo) listedView {
	meta := info.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	return listedView{SandboxID: info.ID, TemplateID: info.Labels[labelTemplate], ClientID: clientID,
		EnvdVersion: envdVersion, StartedAt: info.CreatedAt, EndAt: info.ExpiresAt, State: stateOf(info.State),
		Metadata: meta}
}

// stateOf is E2B's state of a session state.
func stateOf(state string) string {
	if state == manager.StatePaused {
		return "paused"
	}
	return "running"
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	info, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	d := detailView{listedView: listedOf(info), Domain: domain}
	if sb, ok, err := s.deps.Registry.lookup(r.Context(), info.ID); err != nil {
		return err
	} else if ok && sb.tenant == info.Tenant {
		d.EnvdAccessToken, _ = sb.tokens() // empty when minted elsewhere: connect mints new ones
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// listSandboxes answers GET /v2/sandboxes (and the older /sandboxes):
// the caller's tenant's live E2B sandboxes, filtered by ?state= and
// ?metadata=k=v&..., paged by ?limit= and ?nextToken= with the next
// page's token in X-Next-Token.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return invalid("limit", "must be 1 to 1000")
		}
		limit = n
	}
	states := map[string]bool{}
	for _, v := range q["state"] {
		for st := range strings.SplitSeq(v, ",") {
			states[strings.TrimSpace(st)] = true
		}
	}
	meta := map[string]string{}
	if v := q.Get("metadata"); v != "" {
		mq, err := url.ParseQuery(v)
		if err != nil {
			return invalid("metadata", "must be URL-encoded key=value pairs")
		}
		for k := range mq {
			meta[k] = mq.Get(k)
		}
	}
	out := []listedView{}
	cursor, next := q.Get("nextToken"), ""
	for len(out) < limit {
		page, err := s.deps.Manager.ListSessions(r.Context(), p, manager.SessionQuery{Cursor: cursor, Limit: limit})
		if err != nil {
			return err
		}
		for _, info := range page.Sessions {
			cursor = info.QualifiedID
			if info.FrontEnd != frontEnd || !live(info.State) || !hasAll(info.Metadata, meta) {
				continue
			}
			v := listedOf(info)
			if len(states) > 0 && !states[v.State] {
				continue
			}
			out = append(out, v)
			if len(out) == limit {
				next = info.QualifiedID
				break
			}
		}
		if page.NextCursor == "" {
			if len(out) < limit {
				next = ""
			}
			break
		}
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// killSandbox deletes the sandbox's session and its workspace, as E2B's
// kill destroys the sandbox. A sandbox that does not exist is a 404 whose
// body has code 404, which the SDK turns into false.
func (s *Server) killSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	id := r.PathValue("id")
	if _, err := s.session(r, p, id); err != nil {
		return err
	}
	if err := s.deps.Manager.DeleteSession(r.Context(), p, id, true); err != nil {
		return err
	}
	if err := s.deps.Registry.forget(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// timeoutBody is setTimeout's and connect's body.
type timeoutBody struct {
	Timeout *int `json:"timeout"`
}

// setTimeout ends the sandbox that many seconds from now (the session's
// TTL, PATCH /v1/sessions/{id}'s timeout_s).
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if body.Timeout == nil || *body.Timeout < 1 || *body.Timeout > maxTimeout {
		return invalid("timeout", "must be 1 to 2592000 seconds")
	}
	id := r.PathValue("id")
	if _, err := s.session(r, p, id); err != nil {
		return err
	}
	if _, err := s.deps.Manager.PatchSession(r.Context(), p, id, manager.SessionPatch{TimeoutS: body.Timeout}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connectSandbox answers Sandbox.connect (POST /v2/sandboxes/{id}/connect,
// and E2B's older POST /sandboxes/{id}/resume): a paused sandbox is
// resumed (the session's pause, issue 30), its timeout moved when one is
// given, and its tokens answered. It runs on the replica serving the
// session (owned). The tokens are those minted here; a replica that did
// not mint them (the sandbox was made before a restart, or on a replica
// that died since) cannot show them, and mints new ones, which replace
// the old in the store: a client still holding the old ones gets 401 and
// connects again.
func (s *Server) connectSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if body.Timeout != nil && (*body.Timeout < 0 || *body.Timeout > maxTimeout) {
		return invalid("timeout", "must be 0 to 2592000 seconds")
	}
	id := r.PathValue("id")
	info, err := s.session(r, p, id)
	if err != nil {
		return err
	}
	if owner, err := s.deps.Manager.Where(r.Context(), p, id); err != nil {
		return err
	} else if !owner.Local {
		return errElsewhere // one process: not reached; a fleet routes it first
	}
	if info.State == manager.StatePaused {
		if _, err := s.deps.Manager.ResumeSession(r.Context(), p, id); err != nil {
			return err
		}
	}
	if body.Timeout != nil && *body.Timeout > 0 {
		if _, err := s.deps.Manager.PatchSession(r.Context(), p, id, manager.SessionPatch{TimeoutS: body.Timeout}); err != nil {
			return err
		}
	}
	sb, ok, err := s.deps.Registry.served(r.Context(), id)
	if err != nil {
		return err
	}
	switch envd, _ := sbTokens(sb); {
	case !ok || sb.tenant != info.Tenant:
		// No record (made before the registry kept them): registered
		// now with new tokens.
		sb = newSandbox(id, info.Labels[labelTemplate], p, clientOf(r), nil)
		if err := s.deps.Registry.register(r.Context(), sb); err != nil {
			return err
		}
	case envd == "":
		// Tokens this replica cannot show: new ones, for every replica;
		// the sandbox's processes here carry on.
		if err := s.deps.Registry.rotate(r.Context(), sb); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, viewOf(sb))
	return nil
}

// sbTokens is sb's tokens, or none for no sandbox.
func sbTokens(sb *sandbox) (envd, traffic string) {
	if sb == nil {
		return "", ""
	}
	return sb.tokens()
}

// errElsewhere refuses to connect a sandbox another replica serves.
var errElsewhere = errcode.New(errcode.SessionUnavailable,
	"this sandbox is served by another replica of the gateway; retry")

// sdkAgent matches the SDKs' User-Agent: e2b-js-sdk/2.51.0,
// e2b-python-sdk/2.x.
var sdkAgent = regexp.MustCompile(`^e2b-([a-z]+)-sdk/([0-9A-Za-z.+-]+)`)

// clientOf names the SDK as its control-plane request introduced itself
// ("e2b-js 2.51.0"): from its User-Agent, else its lang and
// package_version headers; "" when it said nothing.
func clientOf(r *http.Request) string {
	if m := sdkAgent.FindStringSubmatch(r.UserAgent()); m != nil {
		return manager.Printable("e2b-"+m[1]+" "+m[2], 64)
	}
	lang, ver := r.Header.Get("lang"), r.Header.Get("package_version")
	if lang == "" {
		return ""
	}
	return manager.Printable(strings.TrimSpace("e2b-"+lang+" "+ver), 64)
}
