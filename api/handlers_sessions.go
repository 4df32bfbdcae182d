package api

import (
	"crypto/rand"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// createSessionBody is POST /v1/sessions: an explicit create, for clients
// that want labels, metadata or timeouts (implicit creation by a first run
// stays). ID is generated when empty.
type createSessionBody struct {
	ID           string            `json:"id"`
	Labels       map[string]string `json:"labels"`
	Metadata     map[string]string `json:"metadata"`
	TimeoutS     int               `json:"timeout_s"`
	IdleTimeoutS int               `json:"idle_timeout_s"`
	// FromSnapshot starts the session from a named snapshot of the
	// caller's tenant (its workspace, and its kernel where it kept one).
	FromSnapshot string `json:"from_snapshot"`
	// Snapshot is what a pause must keep: "memory" is refused, naming
	// the missing capability, unless the session's stateful cells go to
	// an executor that keeps memory (gVisor); "filesystem", "none".
	Snapshot string `json:"snapshot"`
}

// maxLabels bounds a session's labels and metadata entries, and
// labelMax each key and value: they are shown and filtered on, not a
// store.
const (
	maxLabels = 64
	labelMax  = 256
)

func (b createSessionBody) check() error {
	var fields []errcode.FieldError
	if b.TimeoutS < 0 || b.TimeoutS > 30*24*3600 {
		fields = append(fields, errcode.FieldError{Field: "timeout_s", Code: "range", Message: "must be 0 (none) to 2592000"})
	}
	if b.IdleTimeoutS < 0 || b.IdleTimeoutS > 30*24*3600 {
		fields = append(fields, errcode.FieldError{Field: "idle_timeout_s", Code: "range", Message: "must be 0 (none) to 2592000"})
	}
	switch b.Snapshot {
	case "", "memory", "filesystem", "none":
	default:
		fields = append(fields, errcode.FieldError{Field: "snapshot", Code: "oneof", Message: "memory, filesystem or none"})
	}
	fields = append(fields, checkLabels("labels", b.Labels)...)
	fields = append(fields, checkLabels("metadata", b.Metadata)...)
	if len(fields) > 0 {
		return &errcode.ValidationError{Kind: errcode.New(errcode.InvalidRequest, "the session is invalid"), Fields: fields}
	}
	return nil
}

func checkLabels(field string, m map[string]string) []errcode.FieldError {
	if len(m) > maxLabels {
		return []errcode.FieldError{{Field: field, Code: "max", Message: "at most 64 entries"}}
	}
	for k, v := range m {
		if k == "" || len(k) > labelMax || len(v) > labelMax || strings.ContainsAny(k, "=,") {
			return []errcode.FieldError{{Field: field, Code: "entry",
				Message: "keys are 1 to 256 bytes without '=' or ','; values at most 256 bytes"}}
		}
	}
	return nil
}

// createSession serves POST /v1/sessions. In a fleet the session is
// created on this replica (a generated id is new everywhere); a named one
// that another replica serves exists: 409.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	var body createSessionBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	if err := body.check(); err != nil {
		return err
	}
	if body.ID == "" {
		body.ID = "s-" + strings.ToLower(rand.Text()[:20])
	}
	info, _, err := s.deps.Manager.CreateSession(r.Context(), principal(r), body.ID, manager.OpenOptions{
		FrontEnd: "rest", Client: r.UserAgent(), Labels: body.Labels, Metadata: body.Metadata,
		TTL: time.Duration(body.TimeoutS) * time.Second, IdleTimeout: time.Duration(body.IdleTimeoutS) * time.Second,
		FromSnapshot: body.FromSnapshot, Snapshot: body.Snapshot,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, info)
	return nil
}

// patchSessionBody is PATCH /v1/sessions/{id}.
type patchSessionBody struct {
	TimeoutS     *int              `json:"timeout_s"`
	IdleTimeoutS *int              `json:"idle_timeout_s"`
	Labels       map[string]string `json:"labels"`
}

// patchSession serves PATCH /v1/sessions/{id}: timeout_s ends the session
// that many seconds from now (E2B's setTimeout; 0 removes the TTL, as at
// creation), idle_timeout_s sets the idle timeout (0 removes it), labels
// replace the labels.
func (s *Server) patchSession(w http.ResponseWriter, r *http.Request) error {
	var body patchSessionBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	check := createSessionBody{Labels: body.Labels}
	if body.TimeoutS != nil {
		check.TimeoutS = *body.TimeoutS
	}
	if body.IdleTimeoutS != nil {
		check.IdleTimeoutS = *body.IdleTimeoutS
	}
	if err := check.check(); err != nil {
		return err
	}
	info, err := s.deps.Manager.PatchSession(r.Context(), principal(r), r.PathValue("id"),
		manager.SessionPatch{TimeoutS: body.TimeoutS, IdleTimeoutS: body.IdleTimeoutS, Labels: body.Labels})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// labelQuery reads ?label=k=v (repeatable) as the labels a listing
// keeps.
func labelQuery(r *http.Request) (map[string]string, error) {
	vals := r.URL.Query()["label"]
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, &errcode.ValidationError{Kind: errcode.New(errcode.InvalidRequest, "bad label filter"),
				Fields: []errcode.FieldError{{Field: "label", Code: "format", Message: "must be key=value"}}}
		}
		out[k] = val
	}
	return out, nil
}
