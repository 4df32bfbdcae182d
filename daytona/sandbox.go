package daytona

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// The sandbox API: create, get, list, delete and the toolbox URL, the
// calls Daytona.create, get, list and Sandbox.delete make
// (research/e2b-compat.md §7). A sandbox is a sandgate session of the
// caller's tenant whose id is the sandbox id, created with front end
// "daytona"; sessions other front ends created are not Daytona sandboxes
// and are not found here.

// createBody is CreateSandbox, as the SDK sends it. Options sandgate does
// not serve are refused when set, never silently ignored; those about a
// stopped sandbox's fate (archive, delete, pause) are accepted and echoed,
// since a sandgate sandbox is never stopped, only ended.
type createBody struct {
	Name   string            `json:"name"`
	Env    map[string]string `json:"env"`
	Labels map[string]string `json:"labels"`
	// Target is the region; one gateway is one region, and any is
	// accepted.
	Target string `json:"target"`
	// AutoStopInterval (minutes, default 15, 0 never) ends a sandbox that
	// long without a request: the session's idle timeout.
	AutoStopInterval *int `json:"autoStopInterval"`
	// TTLMinutes ends the sandbox that long after its creation.
	TTLMinutes          *int `json:"ttlMinutes"`
	AutoArchiveInterval *int `json:"autoArchiveInterval"`
	AutoDeleteInterval  *int `json:"autoDeleteInterval"`
	AutoPauseInterval   *int `json:"autoPauseInterval"`

	Snapshot         string          `json:"snapshot"`
	BuildInfo        json.RawMessage `json:"buildInfo"`
	User             string          `json:"user"`
	Public           bool            `json:"public"`
	CPU              *float64        `json:"cpu"`
	GPU              *float64        `json:"gpu"`
	Memory           *float64        `json:"memory"`
	Disk             *float64        `json:"disk"`
	GPUType          json.RawMessage `json:"gpuType"`
	Spot             bool            `json:"spot"`
	Volumes          json.RawMessage `json:"volumes"`
	KVM              bool            `json:"kvm"`
	NetworkBlockAll  bool            `json:"networkBlockAll"`
	NetworkAllowList string          `json:"networkAllowList"`
	DomainAllowList  string          `json:"domainAllowList"`
	OutboundProxyURL string          `json:"outboundProxyUrl"`
	OtelEndpoint     string          `json:"otelEndpointOverride"`
	LinkedSandbox    string          `json:"linkedSandbox"`
	Secrets          json.RawMessage `json:"secrets"`
}

// sandboxView is Daytona's Sandbox: what create, get and delete answer,
// and, without env, each item of a list.
type sandboxView struct {
	ID                  string             `json:"id"`
	OrganizationID      string             `json:"organizationId"`
	Name                string             `json:"name"`
	User                string             `json:"user"`
	Env                 *map[string]string `json:"env,omitempty"`
	Labels              map[string]string  `json:"labels"`
	Public              bool               `json:"public"`
	NetworkBlockAll     bool               `json:"networkBlockAll"`
	Target              string             `json:"target"`
	CPU                 int                `json:"cpu"`
	GPU                 int                `json:"gpu"`
	Memory              int                `json:"memory"`
	Disk                int                `json:"disk"`
	State               string             `json:"state"`
	DesiredState        string             `json:"desiredState"`
	AutoStopInterval    int                `json:"autoStopInterval"`
	AutoArchiveInterval int                `json:"autoArchiveInterval"`
	AutoDeleteInterval  int                `json:"autoDeleteInterval"`
	AutoDestroyAt       string             `json:"autoDestroyAt,omitempty"`
	CreatedAt           string             `json:"createdAt"`
	UpdatedAt           string             `json:"updatedAt"`
	LastActivityAt      string             `json:"lastActivityAt,omitempty"`
	ToolboxProxyURL     string             `json:"toolboxProxyUrl"`
}

// Constants of the answers.
const (
	// user is the sandbox's OS user as Daytona names it; commands run as
	// the session's own uid.
	user = "daytona"
	// target is the region a sandbox is in: this gateway.
	target = "sandgate"
	// defaultAutoStop is Daytona's default auto-stop interval, minutes.
	defaultAutoStop = 15
	// maxMinutes bounds the intervals (30 days), as POST /v1/sessions
	// bounds a session's timeout.
	maxMinutes = 30 * 24 * 60
	// labelAutoStop keeps the sandbox's autoStopInterval in its session's
	// metadata, to answer it again.
	labelAutoStop = "daytona.autoStopInterval"
	// stateStarted and stateDestroyed are the two states a sandgate
	// sandbox has: live, or gone.
	stateStarted   = "started"
	stateDestroyed = "destroyed"
)

var (
	errNotFound = errcode.New(errcode.NotFound, "the sandbox does not exist")
	errBadJSON  = errcode.New(errcode.InvalidRequest, "the body is not valid JSON for this endpoint")
)

func invalid(field, msg string) error {
	return &errcode.ValidationError{Kind: errcode.New(errcode.InvalidRequest, "the request is invalid"),
		Fields: []errcode.FieldError{{Field: field, Code: "invalid", Message: msg}}}
}

// decodeBody reads a JSON object, ignoring unknown fields; an empty body
// is {}.
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

func isSet(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != "{}" && s != "[]"
}

// check refuses what sandgate does not serve, naming the field.
func (b *createBody) check() error {
	for _, c := range []struct {
		set          bool
		field, cause string
	}{
		{b.Snapshot != "" || isSet(b.BuildInfo), "snapshot", "snapshots and images are not served: every sandbox runs the gateway's runtime image"},
		{b.User != "" && b.User != user, "user", "the sandbox's user is the gateway's choice"},
		{b.Public, "public", "public previews are not served by sandgate"},
		{b.CPU != nil || b.GPU != nil || b.Memory != nil || b.Disk != nil || isSet(b.GPUType) || b.Spot || b.KVM,
			"resources", "resources are set by the gateway's executors and policy, not per sandbox"},
		{isSet(b.Volumes), "volumes", "volumes are not served by sandgate"},
		{b.NetworkBlockAll || b.NetworkAllowList != "" || b.DomainAllowList != "" || b.OutboundProxyURL != "",
			"network", "network access is decided by the gateway's egress policy, per request, not per sandbox"},
		{b.OtelEndpoint != "", "otelEndpointOverride", "not served by sandgate"},
		{b.LinkedSandbox != "", "linkedSandbox", "not served by sandgate"},
		{isSet(b.Secrets), "secrets", "secrets are not served by sandgate"},
		{len(b.Env) > 0, "envVars", "sandbox-wide environment variables are not served: pass env to executeCommand"},
	} {
		if c.set {
			return invalid(c.field, c.cause)
		}
	}
	for field, v := range map[string]*int{"autoStopInterval": b.AutoStopInterval, "ttlMinutes": b.TTLMinutes,
		"autoArchiveInterval": b.AutoArchiveInterval, "autoDeleteInterval": b.AutoDeleteInterval, "autoPauseInterval": b.AutoPauseInterval} {
		if v != nil && (*v < -1 || *v > maxMinutes) {
			return invalid(field, "must be 0 to 43200 minutes")
		}
	}
	if len(b.Labels) > 64 {
		return invalid("labels", "at most 64 entries")
	}
	for k, v := range b.Labels {
		if k == "" || len(k) > 256 || len(v) > 256 || strings.ContainsAny(k, "=,") || strings.HasPrefix(k, "daytona.") {
			return invalid("labels", "keys are 1 to 256 bytes without '=' or ',' and not in daytona.*; values at most 256 bytes")
		}
	}
	return nil
}

// newSandboxID is a fresh sandbox id, also the session's id.
func newSandboxID() string { return "dtn-" + strings.ToLower(rand.Text()[:20]) }

// createSandbox creates the sandbox's session: started at once (there is
// nothing to pull or boot: the executor the policy chooses starts with
// the first command).
func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	var body createBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if err := body.check(); err != nil {
		return err
	}
	autoStop := defaultAutoStop
	if body.AutoStopInterval != nil {
		autoStop = max(*body.AutoStopInterval, 0)
	}
	var ttl time.Duration
	if body.TTLMinutes != nil && *body.TTLMinutes > 0 {
		ttl = time.Duration(*body.TTLMinutes) * time.Minute
	}
	id := body.Name
	if id == "" {
		id = newSandboxID()
	}
	labels := map[string]string{}
	for k, v := range body.Labels {
		labels[k] = v
	}
	info, owner, err := s.deps.Manager.CreateSession(r.Context(), p, id, manager.OpenOptions{
		FrontEnd: frontEnd, Client: manager.Printable(r.UserAgent(), 128), Labels: labels,
		Metadata: map[string]string{labelAutoStop: strconv.Itoa(autoStop)},
		TTL:      ttl, IdleTimeout: time.Duration(autoStop) * time.Minute,
	})
	if err != nil {
		return err
	}
	if !owner.Local {
		return manager.ErrSessionElsewhere
	}
	v := s.viewOf(r, info, stateStarted)
	env := map[string]string{}
	v.Env = &env
	v.AutoArchiveInterval, v.AutoDeleteInterval = intOr(body.AutoArchiveInterval, 0), intOr(body.AutoDeleteInterval, -1)
	writeJSON(w, http.StatusOK, v)
	return nil
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// viewOf is a session as a Daytona sandbox.
func (s *Server) viewOf(r *http.Request, info manager.SessionInfo, state string) sandboxView {
	labels := map[string]string{}
	for k, v := range info.Labels {
		labels[k] = v
	}
	autoStop, err := strconv.Atoi(info.Metadata[labelAutoStop])
	if err != nil {
		autoStop = int(info.IdleTimeoutS / 60)
	}
	v := sandboxView{
		ID: info.ID, OrganizationID: info.Tenant, Name: info.ID, User: user, Labels: labels, Target: target,
		State: state, DesiredState: state, AutoStopInterval: autoStop, AutoDeleteInterval: -1,
		CreatedAt: stamp(info.CreatedAt), UpdatedAt: stamp(info.CreatedAt), LastActivityAt: stamp(info.LastActiveAt),
		ToolboxProxyURL: s.toolboxURL(r),
	}
	if !info.LastActiveAt.IsZero() {
		v.UpdatedAt = v.LastActivityAt
	}
	if !info.ExpiresAt.IsZero() {
		v.AutoDestroyAt = stamp(info.ExpiresAt)
	}
	return v
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// toolboxURL is where the SDK sends a sandbox's toolbox calls (it appends
// /<sandbox id>/...): the configured public URL or, without one, the URL
// the caller reached the gateway by.
func (s *Server) toolboxURL(r *http.Request) string {
	base := s.cfg.PublicURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	return base + toolboxPrefix
}

// session is the caller's live Daytona sandbox id as the manager
// describes it; a session another front end made is not found.
func (s *Server) session(r *http.Request, p manager.Principal, id string) (manager.SessionInfo, error) {
	info, err := s.deps.Manager.Session(r.Context(), p, id)
	if err != nil {
		if code, _, _ := errcode.Of(err); code == errcode.InvalidRequest || code == errcode.PathTraversal {
			return info, errNotFound
		}
		return info, err
	}
	if info.FrontEnd != frontEnd || info.State == manager.StateExpired || info.State == manager.StateDeleted {
		return info, errNotFound
	}
	return info, nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	info, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	v := s.viewOf(r, info, stateStarted)
	env := map[string]string{}
	v.Env = &env
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) toolboxProxyURL(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	if _, err := s.session(r, p, r.PathValue("id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"url": s.toolboxURL(r)})
	return nil
}

// listResponse is ListSandboxesResponse.
type listResponse struct {
	Items      []sandboxView `json:"items"`
	NextCursor *string       `json:"nextCursor"`
}

// listSandboxes answers GET /sandbox: the caller's tenant's live Daytona
// sandboxes, filtered by ?labels= (a JSON object), ?id= and ?name=, paged
// by ?limit= and ?cursor=.
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
	var labels map[string]string
	if v := q.Get("labels"); v != "" {
		if json.Unmarshal([]byte(v), &labels) != nil {
			return invalid("labels", "must be a JSON object of strings")
		}
	}
	want := q.Get("id")
	if n := q.Get("name"); n != "" {
		if want != "" && want != n {
			writeJSON(w, http.StatusOK, listResponse{Items: []sandboxView{}})
			return nil
		}
		want = n
	}
	out := listResponse{Items: []sandboxView{}}
	cursor := q.Get("cursor")
	for len(out.Items) < limit {
		page, err := s.deps.Manager.ListSessions(r.Context(), p, manager.SessionQuery{Labels: labels, Cursor: cursor, Limit: limit})
		if err != nil {
			return err
		}
		for _, info := range page.Sessions {
			cursor = info.QualifiedID
			if info.FrontEnd != frontEnd || info.State == manager.StateExpired || info.State == manager.StateDeleted ||
				(want != "" && info.ID != want) {
				continue
			}
			out.Items = append(out.Items, s.viewOf(r, info, stateStarted))
			if len(out.Items) == limit {
				next := info.QualifiedID
				out.NextCursor = &next
				break
			}
		}
		if page.NextCursor == "" {
			if len(out.Items) < limit {
				out.NextCursor = nil
			}
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteSandbox deletes the sandbox's session and its workspace, as
// Daytona's delete destroys the sandbox, and answers it destroyed.
func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	info, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	handled, r, err := s.route(w, r, info)
	if err != nil || handled {
		return err
	}
	if err := s.deps.Manager.DeleteSession(r.Context(), p, info.ID, true); err != nil {
		return err
	}
	v := s.viewOf(r, info, stateDestroyed)
	env := map[string]string{}
	v.Env = &env
	writeJSON(w, http.StatusOK, v)
	return nil
}
