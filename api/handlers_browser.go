package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

var errBrowserOff = errcode.New(errcode.ExecutorUnavailable, "the browser is not enabled on this gateway")

// browserBody is POST /v1/sessions/{id}/browser. Params are decoded by the
// browser package, strictly, per action.
type browserBody struct {
	Action  string               `json:"action"`
	Params  json.RawMessage      `json:"params"`
	Context browser.RouteContext `json:"context"`
}

// browserResponse is a finished action.
type browserResponse struct {
	Action  string `json:"action"`
	Backend string `json:"backend"`
	Started bool   `json:"started"`
	Result  any    `json:"result"`
	// Blocked lists the requests the policy refused while the action ran.
	Blocked        []browser.Blocked `json:"blocked"`
	BlockedDropped int               `json:"blocked_dropped,omitempty"`
	// Warnings lists the requests let through only because the rules
	// that would have refused them are in warn mode: the agent is told,
	// as a run's decision.warnings tells it.
	Warnings   []browser.Warning `json:"warnings,omitempty"`
	DurationMS int64             `json:"duration_ms"`
	RequestID  string            `json:"request_id"`
}

func (s *Server) browserAction(w http.ResponseWriter, r *http.Request) error {
	var body browserBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	p := principal(r)
	// The router is keyed by the session's key, so the caller's session is
	// resolved and admitted here, first: another tenant's is not_found, and
	// a tenant over its quotas is refused, whether or not this gateway has
	// a browser.
	ref, release, err := s.deps.Manager.AdmitSession(r.Context(), p, r.PathValue("id"), browser.KindAction)
	defer release()
	if err != nil {
		return err
	}
	if s.deps.Browser == nil {
		return errBrowserOff
	}
	res, err := s.deps.Browser.Do(r.Context(), browser.Request{
		RequestID: requestID(r.Context()), SessionID: ref.Key, Principal: p.Role + ":" + p.Name,
		Action: body.Action, Params: body.Params, Context: body.Context,
	})
	if err != nil {
		return browserError(err)
	}
	writeJSON(w, http.StatusOK, browserResponse{
		Action: res.Action, Backend: res.Backend, Started: res.Started, Result: res.Data,
		Blocked: res.Blocked, BlockedDropped: res.BlockedDropped, Warnings: res.Warnings, DurationMS: res.Duration.Milliseconds(),
		RequestID: requestID(r.Context()),
	})
	return nil
}

// browserError gives the browser's policy errors the shape the one error
// writer renders (reasons); the code is unchanged. Field errors need
// nothing: both packages use errcode.ValidationError.
func browserError(err error) error {
	var de *browser.DeniedError
	if errors.As(err, &de) {
		return &manager.DeniedError{Kind: de, Reasons: de.Reasons}
	}
	return err
}
