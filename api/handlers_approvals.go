package api

import (
	"errors"
	"io/fs"
	"net/http"
	"path"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/policy"
)

var errApprovalsOff = errcode.New(errcode.NotFound, "approvals are not enabled on this gateway")

// maxApprovalList caps GET /v1/approvals for resolved statuses.
const maxApprovalList = 500

type approvalList struct {
	Approvals []confirm.View `json:"approvals"`
}

// decisionBody is POST /v1/approvals/{id}/decision. Digest is optional for
// API clients; when present it must be the approval's digest (the page
// always sends the one it displayed).
type decisionBody struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Digest   string `json:"digest"`
	// Scope is "once" (the default) or, for an egress approval,
	// "session": the session's later connections to the same host:port
	// pass without asking.
	Scope string `json:"scope"`
	// ForS, with scope "session" or "pattern" on a run approval, makes
	// the approval a grant for that many seconds (confirm.Grants).
	ForS int `json:"for_s,omitempty"`
	// PathPrefix, with scope "session" and for_s on a held egress
	// request, is the path prefix of the grant (confirm/grants_egress.go).
	PathPrefix string `json:"path_prefix,omitempty"`
}

// conflictBody is the 409 answer: the usual error body plus the approval's
// final state, so the caller sees who decided first, and how.
type conflictBody struct {
	Error    errorDetail  `json:"error"`
	Approval confirm.View `json:"approval"`
}

// listApprovals answers ?status=pending (the default: every pending
// approval, with its code, oldest first) or a resolved status (approved,
// denied, timeout, withdrawn, interrupted, or "resolved" for all of them:
// the most recent from the database, newest first, without code). An
// approver limited to tenants sees only those tenants' approvals, here,
// on the socket and on the page; any other approval is not_found to it.
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) error {
	hub := s.deps.Approvals
	if hub == nil {
		return errApprovalsOff
	}
	status := r.URL.Query().Get("status")
	switch status {
	case "", confirm.StatusPending:
		writeJSON(w, http.StatusOK, approvalList{Approvals: hub.PendingFor(approver(r))})
		return nil
	case "resolved":
		status = ""
	case confirm.StatusApproved, confirm.StatusDenied, confirm.StatusTimeout, confirm.StatusWithdrawn, confirm.StatusInterrupted:
	default:
		return &fieldErr{field: fieldErrorOf("status", "must be pending, resolved, approved, denied, timeout, withdrawn or interrupted")}
	}
	limit, err := intParam(r, "limit", 50)
	if err != nil {
		return err
	}
	if limit == 0 || limit > maxApprovalList {
		limit = maxApprovalList
	}
	views, err := hub.RecentFor(r.Context(), approver(r), status, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, approvalList{Approvals: views})
	return nil
}

func (s *Server) getApproval(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Approvals == nil {
		return errApprovalsOff
	}
	v, err := s.deps.Approvals.GetFor(r.Context(), r.PathValue("id"), approver(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// decideApproval records a decision. decided_by is the token's name. The
// first decision wins; a later one gets 409 conflict with the approval's
// final state.
func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Approvals == nil {
		return errApprovalsOff
	}
	var body decisionBody
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	v, err := s.deps.Approvals.Decide(r.Context(), r.PathValue("id"), approver(r),
		confirm.Decision{Decision: body.Decision, Reason: body.Reason, Digest: body.Digest, Scope: body.Scope, ForS: body.ForS,
			PathPrefix: body.PathPrefix})
	var ce *confirm.ConflictError
	switch {
	case errors.As(err, &ce):
		code, status, msg := errcode.Of(err)
		a := ce.Approval
		writeJSON(w, status, conflictBody{Approval: a, Error: errorDetail{Code: code, Message: msg,
			RequestID: requestID(r.Context()),
			Reasons:   []policy.Reason{{Code: "approval_" + a.Status, Message: resolvedBy(a)}}}})
		return nil
	case errors.Is(err, confirm.ErrInvalidDecision):
		return &fieldErr{field: fieldErrorOf("decision", `must be "approve" or "deny"`)}
	case errors.Is(err, confirm.ErrInvalidScope):
		return &fieldErr{field: fieldErrorOf("scope", `must be "once"; "session" for an egress approval; "session" or "pattern" with for_s for a run`)}
	case errors.Is(err, confirm.ErrGrantDuration):
		return &fieldErr{field: fieldErrorOf("for_s", err.Error())}
	case errors.Is(err, confirm.ErrGrantPrefix):
		return &fieldErr{field: fieldErrorOf("path_prefix", err.Error())}
	case errors.Is(err, confirm.ErrReasonTooLong):
		return &fieldErr{field: fieldErrorOf("reason", "must be at most 1000 bytes")}
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func resolvedBy(v confirm.View) string {
	if v.DecidedBy != "" {
		return v.Status + " by " + v.DecidedBy
	}
	return v.Status
}

// socketAuth lets a browser authenticate the socket: it cannot set an
// Authorization header on a WebSocket, so it offers the token as a
// subprotocol (see confirm.BearerProtocolPrefix), which becomes the
// Authorization header of this request only. The Origin check comes first,
// so a cross-site page learns nothing, not even whether a token is valid.
func (s *Server) socketAuth(next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if hub := s.deps.Approvals; hub != nil && !hub.CheckOrigin(r) {
			return confirm.ErrOrigin
		}
		if r.Header.Get("Authorization") == "" {
			if tok, ok := confirm.TokenFromSubprotocol(r); ok {
				r = r.Clone(r.Context())
				r.Header.Set("Authorization", "Bearer "+tok)
			}
		}
		return next(w, r)
	}
}

// channelCallback hands a callback to the approval channel it names,
// which authenticates it (confirm.CallbackChannel).
func (s *Server) channelCallback(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Approvals == nil {
		return errApprovalsOff
	}
	return s.deps.Approvals.ServeCallback(w, r, r.PathValue("name"))
}

func (s *Server) approvalSocket(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Approvals == nil {
		return errApprovalsOff
	}
	return s.deps.Approvals.ServeWS(w, r, approver(r))
}

// pageCSP allows the page's own script, style and socket, and nothing else:
// no inline script, no framing, no form posts, no other origin.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// approvalPage serves the page. It is public: it holds no data. The token
// arrives as /?token=..., which the page moves to sessionStorage and strips
// from the address bar before anything else runs; Referrer-Policy keeps it
// out of the Referer of the page's own asset requests.
func (s *Server) approvalPage(w http.ResponseWriter, _ *http.Request) error {
	return serveAsset(w, "index.html", "no-store")
}

func (s *Server) approvalAsset(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("file")
	if name == "index.html" || path.Base(name) != name {
		return errNotFound
	}
	return serveAsset(w, name, "no-cache")
}

var assetTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

func serveAsset(w http.ResponseWriter, name, cache string) error {
	ctype, ok := assetTypes[path.Ext(name)]
	if !ok {
		return errNotFound
	}
	b, err := fs.ReadFile(confirm.WebAssets(), name)
	if err != nil {
		return errNotFound
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", cache)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return nil
}
