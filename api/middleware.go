package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/manager"
)

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyIdentity
	keyForwarded
)

var errPanic = errors.New("handler panic") // maps to internal

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return "req_" + hex.EncodeToString(b[:])
}

func withRequestID(ctx context.Context, id string) context.Context {
	return manager.WithRequestID(context.WithValue(ctx, keyRequestID, id), id)
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(keyRequestID).(string)
	return id
}

// authorize checks the bearer token and the route's roles: 401 without a
// valid token, 403 with a token of another role.
func (s *Server) authorize(roles []Role, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, ok := s.deps.Auth.authenticate(r)
		if !ok {
			return errUnauthorized
		}
		if !slices.Contains(roles, id.Role) {
			return errForbidden
		}
		return h(w, r.WithContext(context.WithValue(r.Context(), keyIdentity, id)))
	}
}

func identity(r *http.Request) Identity {
	id, _ := r.Context().Value(keyIdentity).(Identity)
	return id
}

// principal is the caller as the manager knows it: role, name and tenant.
func principal(r *http.Request) manager.Principal {
	id := identity(r)
	return manager.Principal{Role: string(id.Role), Name: id.Name, Tenant: id.Tenant}
}

// approver is the caller as the approval hub knows it, with the tenants it
// may see (none listed: all of them).
func approver(r *http.Request) confirm.Approver {
	id := identity(r)
	return confirm.Approver{Name: id.Name, Role: string(id.Role), Tenants: id.Tenants}
}
