package e2b

import (
	"net/http"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// Pause, resume and fork: E2B's calls mapped onto the session's pause,
// resume and fork (issue 30, package manager). The SDK's
// Sandbox.pause/betaPause is POST /sandboxes/{id}/pause; Sandbox.connect
// resumes a paused sandbox (connectSandbox); Sandbox.fork is POST
// /sandboxes/{id}/fork. Each runs on the replica serving the session
// (owned), where its processes are.

// pauseBody is the pause call's body. Memory (the SDK's keepMemory) is
// not the caller's choice here: what a pause keeps is the executor's
// (a gVisor kernel keeps its memory; elsewhere the workspace stays and
// the next cell says its kernel restarted), so it is accepted and not
// acted on.
type pauseBody struct {
	Memory *bool `json:"memory"`
}

// errAlreadyPaused is E2B's 409 for a pause of a paused sandbox, which
// the SDK turns into false.
var errAlreadyPaused = errcode.New(errcode.Conflict, "the sandbox is already paused")

// pauseSandbox pauses the sandbox's session: its containers and
// processes are freed, its background commands killed; its files, tokens
// and record stay, and connect resumes it.
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	var body pauseBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	id := r.PathValue("id")
	info, err := s.session(r, p, id)
	if err != nil {
		return err
	}
	if info.State == manager.StatePaused {
		return errAlreadyPaused
	}
	if _, err := s.deps.Manager.PauseSession(r.Context(), p, id); err != nil {
		return err
	}
	s.deps.Registry.pauseLocal(id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// forkBody is the fork call's body.
type forkBody struct {
	// Timeout is each child's lifetime in seconds; none keeps E2B's
	// default.
	Timeout *int `json:"timeout"`
	// Count is how many children; none is one.
	Count *int `json:"count"`
}

// forkResult is one child as E2B's fork answers it: the sandbox, or the
// error that kept it from starting.
type forkResult struct {
	Sandbox *sandboxView `json:"sandbox,omitempty"`
	Error   *apiError    `json:"error,omitempty"`
}

// forkSandbox starts count sandboxes from this one (the session's fork:
// a copy of its workspace each and, under gVisor, its kernel's memory),
// each a new E2B sandbox with its own tokens, the parent's template, SDK
// and envs, and the timeout asked for (E2B's default otherwise). Policy
// does not follow the parent: each child's runs are decided afresh.
func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	var body forkBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	count, timeout := 1, defaultTimeout
	if body.Count != nil {
		count = *body.Count
	}
	if body.Timeout != nil {
		if *body.Timeout < 1 || *body.Timeout > maxTimeout {
			return invalid("timeout", "must be 1 to 2592000 seconds")
		}
		timeout = *body.Timeout
	}
	id := r.PathValue("id")
	if _, err := s.session(r, p, id); err != nil {
		return err
	}
	parent, ok, err := s.deps.Registry.lookup(r.Context(), id)
	if err != nil {
		return err
	}
	template, client := "base", clientOf(r)
	var envs map[string]string
	if ok {
		template, client, envs = parent.template, parent.client, parent.envs
	}
	res, err := s.deps.Manager.ForkSession(r.Context(), p, id, count)
	if err != nil {
		return err
	}
	out := make([]forkResult, 0, len(res.Sessions))
	for _, child := range res.Sessions {
		out = append(out, s.forkChild(r, p, child, template, client, envs, timeout))
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// forkChild registers one child of a fork as an E2B sandbox; a child that
// cannot be registered is deleted, and its entry carries the error.
func (s *Server) forkChild(r *http.Request, p manager.Principal, child manager.SessionInfo, template, client string,
	envs map[string]string, timeout int) forkResult {
	ctx := r.Context()
	_, err := s.deps.Manager.PatchSession(ctx, p, child.ID, manager.SessionPatch{TimeoutS: &timeout})
	sb := newSandbox(child.ID, template, p, client, envs)
	if err == nil {
		err = s.deps.Registry.register(ctx, sb)
	}
	if err != nil {
		_ = s.deps.Manager.DeleteSession(ctx, p, child.ID, true)
		_, status, msg := errcode.Of(err)
		return forkResult{Error: &apiError{Code: status, Message: msg}}
	}
	v := viewOf(sb)
	return forkResult{Sandbox: &v}
}
