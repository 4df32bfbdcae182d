package executors

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"time"
)

// The errors of the prologue: one set, returned (wrapped, prefixed with the
// backend's kind) by every backend for a Spec it refuses before running
// anything. They are caller bugs, never unavailability: validation and the
// workspace package should have stopped such a Spec.
var (
	// ErrUnsupportedLanguage: the Spec names a language no backend knows.
	ErrUnsupportedLanguage = errors.New("unsupported language")
	// ErrInvalidRequestID: Spec.RequestID cannot name a file (it names the
	// spill and code files of the run).
	ErrInvalidRequestID = errors.New("invalid request id")
	// ErrRootIdentity: the run would execute as uid or gid 0.
	ErrRootIdentity = errors.New("refusing to run sandboxed code as root")
	// ErrInvalidTimeout: Spec.Timeout is negative, or there is no timeout
	// at all (a run is never unbounded).
	ErrInvalidTimeout = errors.New("invalid timeout")
	// ErrInvalidWorkspace: Spec.WorkspaceDir is not an absolute path (or,
	// for a backend that opens it, not a directory it can open).
	ErrInvalidWorkspace = errors.New("invalid workspace")
	// ErrInvalidLayout: Spec.Layout names a root or workdir no backend
	// may present (Layout.Validate).
	ErrInvalidLayout = errors.New("invalid layout")
)

// KnownLanguage reports whether lang is one of the Lang* constants.
func KnownLanguage(lang string) bool {
	switch lang {
	case LangPython, LangBash, LangJavaScript:
		return true
	}
	return false
}

// Prologue is what every Execute does first, before it touches anything:
// it checks the language, the request id and the identity, and applies
// the backend's configured defaults (identity, timeout, limits) to what
// the Spec leaves at zero. Its fields are the backend's configured values,
// after the backend's own defaults.
type Prologue struct {
	// Kind prefixes the errors.
	Kind Kind
	// UID and GID are the identity of a Spec that names none.
	UID, GID int
	// Timeout applies to a Spec whose Timeout is zero.
	Timeout time.Duration
	// Limits fill the Spec's zero limits (Limits.Or).
	Limits Limits
}

// Resolve returns spec ready to run: RequestID valid (a random one when
// empty), UID and GID set and never 0, WorkspaceDir absolute and clean,
// Timeout positive, every limit merged over the defaults. A refused Spec
// gets an error wrapping one of the prologue's sentinels.
func (p Prologue) Resolve(spec Spec) (Spec, error) {
	if !KnownLanguage(spec.Language) {
		return Spec{}, p.fail(ErrUnsupportedLanguage, "%q", spec.Language)
	}
	id, err := requestID(spec.RequestID)
	if err != nil {
		return Spec{}, p.fail(ErrInvalidRequestID, "%q", spec.RequestID)
	}
	spec.RequestID = id
	if spec.UID == 0 && spec.GID == 0 {
		spec.UID, spec.GID = p.UID, p.GID
	}
	if spec.UID <= 0 || spec.GID <= 0 {
		return Spec{}, p.fail(ErrRootIdentity, "(uid %d gid %d)", spec.UID, spec.GID)
	}
	if !filepath.IsAbs(spec.WorkspaceDir) {
		return Spec{}, p.fail(ErrInvalidWorkspace, "%q is not an absolute path", spec.WorkspaceDir)
	}
	spec.WorkspaceDir = filepath.Clean(spec.WorkspaceDir)
	if err := spec.Layout.Validate(); err != nil {
		return Spec{}, p.fail(ErrInvalidLayout, "%v", err)
	}
	if spec.Timeout == 0 {
		spec.Timeout = p.Timeout
	}
	if spec.Timeout <= 0 {
		return Spec{}, p.fail(ErrInvalidTimeout, "%v", spec.Timeout)
	}
	spec.Limits = spec.Limits.Or(p.Limits)
	return spec, nil
}

func (p Prologue) fail(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", p.Kind, sentinel, fmt.Sprintf(format, args...))
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// requestID validates id for use as a file name, or makes a random one
// when the caller gave none.
func requestID(id string) (string, error) {
	if id == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		return "run-" + hex.EncodeToString(b[:]), nil
	}
	if !requestIDPattern.MatchString(id) || id == "." || id == ".." {
		return "", ErrInvalidRequestID
	}
	return id, nil
}
