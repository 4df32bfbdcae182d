package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/workspace"
)

// Tenancy (DESIGN.md §5). Every session belongs to the tenant of the caller
// that created it, and session names are per tenant: team-a's "demo" and
// team-b's "demo" are two sessions, with two workspaces, and, because the
// executors are handed the session's key (tenant~name) as Spec.SessionID
// and its own directory as the workspace, two sets of zygotes, warm
// containers and pool instances.
//
// A client names a session by its name ("demo"), which is resolved in its
// own tenant, or by its qualified id ("team-a~demo", what listings show as
// qualified_id). A qualified id of another tenant is not_found, for every
// operation, and so is a name the caller's tenant does not have: the two
// answers are the same, so probing tells a caller nothing about other
// tenants' sessions. Admins reach every tenant's sessions by qualified id,
// and workspaces made before tenants (which belong to none) as "~name".

// RoleAdmin is the role that sees every tenant's sessions.
const RoleAdmin = "admin"

// SessionRef is a session resolved for a caller.
type SessionRef struct {
	// Tenant owns the session.
	Tenant string
	// ID is the session's name within its tenant, as clients send it.
	ID string
	// Key is workspace.Key(Tenant, ID): the workspace directory's name, the
	// executors' session id, and the key of every per-session state.
	Key string
}

// errNoTenant is a caller without a tenant: a wiring mistake (the API
// always sets one), refused rather than given a shared namespace.
var errNoTenant = errors.New("manager: the caller has no tenant")

// errSessionNotFound is the answer for another tenant's session. It is the
// workspace's own not-found error, so it cannot be told apart from a
// session that does not exist.
var errSessionNotFound = workspace.ErrNotFound

// ResolveSession is the one place where a session named by a client is
// resolved for its caller. Every session-scoped operation goes through it
// before it touches anything: Run, Evaluate, the file operations, Session
// and DeleteSession call it themselves, and work the manager does not do
// itself (the browser router) calls it through AdmitSession. The streaming
// run_code/execute and the MCP tools (DESIGN.md §10) must do the same: call
// Run, the file methods, Session, DeleteSession or AdmitSession with the
// caller's Principal, never reach a workspace or an executor by a name the
// client sent.
func (m *Manager) ResolveSession(p Principal, id string) (SessionRef, error) {
	if p.Tenant == "" {
		return SessionRef{}, errNoTenant
	}
	if name, ok := strings.CutPrefix(id, workspace.KeySep); ok {
		return resolveUntenanted(p, name)
	}
	if err := workspace.ValidateKey(id); err != nil {
		return SessionRef{}, invalidFields(sessionIDField)
	}
	tenant, name := workspace.SplitKey(id)
	switch {
	case tenant == "":
		tenant = p.Tenant
	case tenant != p.Tenant && p.Role != RoleAdmin:
		return SessionRef{}, fmt.Errorf("%w: %s", errSessionNotFound, id)
	}
	return SessionRef{Tenant: tenant, ID: name, Key: workspace.Key(tenant, name)}, nil
}

// resolveUntenanted resolves "~name": a workspace made before tenants,
// which belongs to no tenant. Only an admin reaches it (to read or purge
// it after an upgrade); to anyone else it is not found.
func resolveUntenanted(p Principal, name string) (SessionRef, error) {
	if workspace.ValidateSessionID(name) != nil {
		return SessionRef{}, invalidFields(sessionIDField)
	}
	if p.Role != RoleAdmin {
		return SessionRef{}, fmt.Errorf("%w: %s", errSessionNotFound, name)
	}
	return SessionRef{ID: name, Key: name}, nil
}

// sessionIDField is the field error of a session id that is neither a
// name nor a qualified id.
var sessionIDField = FieldError{Field: "session_id", Code: "session_id",
	Message: "must match [A-Za-z0-9._-]{1,128} and not be . or .., optionally prefixed by its tenant and ~"}

// Kinds of the audit records of session requests that are not executions
// or file operations. A session's deletion is always recorded; a read, a
// listing or a dry run only when a quota refuses it (a refusal is always
// audited).
const (
	KindSessionGet    = "session.get"
	KindSessionList   = "session.list"
	KindSessionDelete = "session.delete"
	KindEvaluate      = "evaluate"
)

type ctxKey int

const keyRequestID ctxKey = 0

// WithRequestID gives ctx the request's id, for the audit records the
// manager writes for requests that carry no RequestID field (session
// reads, listings, deletions, refusals).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, keyRequestID, id)
}

func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(keyRequestID).(string)
	return id
}

// AdmitSession resolves the session id names for p and admits one request
// on it that the manager does not run itself (a browser action, kind),
// checking the tenant's rate and live-session quotas. It returns the
// session and a release to call when the request is over. A refusal
// (another tenant's session, a quota) is audited as a record of kind,
// since the work it refused never reaches its own recorder.
func (m *Manager) AdmitSession(ctx context.Context, p Principal, id, kind string) (SessionRef, func(), error) {
	ref, err := m.ResolveSession(p, id)
	if err != nil {
		m.refused(ctx, kind, p, SessionRef{Tenant: p.Tenant, ID: id}, err)
		return SessionRef{}, func() {}, err
	}
	release, err := m.admit(ctx, ref, opCreate)
	// A browser action holds state where the session is served: it must
	// be served here. Other kinds (a DeerFlow sandbox's registration) are
	// served by any replica.
	browser := strings.HasPrefix(kind, "browser.")
	var s *Session
	if err == nil && browser {
		s, err = m.local(ctx, ref)
	}
	if err != nil {
		release()
		m.refused(ctx, kind, p, ref, err)
		return SessionRef{}, func() {}, err
	}
	if browser {
		m.hold(ctx, s, HeldBrowser)
		s.touch()
	}
	return ref, release, nil
}

// refused records a request of kind refused before it did anything.
func (m *Manager) refused(ctx context.Context, kind string, p Principal, ref SessionRef, err error) {
	rec := &audit.Record{RequestID: requestIDFrom(ctx), Kind: kind, Tenant: ref.Tenant, SessionID: ref.ID,
		Principal: p.Role + ":" + p.Name}
	m.record(ctx, rec, fileOutcome(err), err, time.Now())
}
