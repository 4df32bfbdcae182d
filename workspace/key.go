package workspace

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sandgate/sandgate/errcode"
)

// Tenancy. Every session belongs to a tenant, and the same session name
// under two tenants names two sessions. The workspace keeps them apart by
// key: a session's key is its tenant, KeySep and its name ("team-a~demo"),
// and the key, not the name, is the directory under the root, the id the
// executors get (so zygotes, warm containers and pool instances are per
// tenant and session) and what every function of this package takes as
// sessionID.
//
// The separator is outside the session-id alphabet, so a key splits one way
// only and no name a client can send is another tenant's key in disguise.
// "~" is unreserved in URLs (RFC 3986), plain in file names, Docker labels
// and bind-mount specs (unlike ":" or ","), and never first in a key, so no
// shell expands it.
//
// A key without a tenant (a bare session id) is still valid: workspaces
// made before tenants existed keep working for callers that name them, and
// admins see them with an empty tenant.
const KeySep = "~"

// ErrInvalidTenant is returned for a tenant name that could not prefix a
// session key.
var ErrInvalidTenant = errcode.New(errcode.InvalidRequest, "invalid tenant name")

var tenantRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidateTenant reports whether name may name a tenant: 1 to 64 of
// [A-Za-z0-9._-], starting with a letter or digit.
func ValidateTenant(name string) error {
	if !tenantRe.MatchString(name) {
		return fmt.Errorf("%w: must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}", ErrInvalidTenant)
	}
	return nil
}

// Key is the key of session id of tenant. Both must be valid (see
// ValidateKey); Key does not check them.
func Key(tenant, id string) string { return tenant + KeySep + id }

// SplitKey returns the tenant and the session name of key; a key without
// a tenant returns "" and the key.
func SplitKey(key string) (tenant, id string) {
	if t, id, ok := strings.Cut(key, KeySep); ok {
		return t, id
	}
	return "", key
}

// ValidateKey reports whether key may name a session's workspace: a valid
// session id, optionally prefixed by a valid tenant and KeySep.
func ValidateKey(key string) error {
	tenant, id, qualified := strings.Cut(key, KeySep)
	if !qualified {
		return ValidateSessionID(key)
	}
	if ValidateTenant(tenant) != nil {
		return fmt.Errorf("%w: the tenant part is not a valid tenant name", ErrInvalidSessionID)
	}
	return ValidateSessionID(id)
}
