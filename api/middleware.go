package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"

	"github.com/sandgate/sandgate/manager"
)

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyToken
)

var errPanic = errors.New("handler panic") // maps to internal

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return "req_" + hex.EncodeToString(b[:])
}

func withRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, keyRequestID, id)
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(keyRequestID).(string)
	return id
}

// authorize checks the bearer token and the route's roles: 401 without a
// valid token, 403 with a token of another role.
func (s *Server) authorize(roles []Role, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		tok, ok := s.deps.Auth.authenticate(r)
		if !ok {
			return errUnauthorized
		}
		if !slices.Contains(roles, tok.Role) {
			return errForbidden
		}
		return h(w, r.WithContext(context.WithValue(r.Context(), keyToken, tok)))
	}
}

func principal(r *http.Request) manager.Principal {
	tok, _ := r.Context().Value(keyToken).(Token)
	return manager.Principal{Role: string(tok.Role), Name: tok.Name}
}
