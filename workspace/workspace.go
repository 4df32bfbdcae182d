// Package workspace owns the per-session directory tree that every executor
// runs in and that the file API (a later issue) reads and writes.
//
// Each session gets one directory under a configured root. The session id is
// the directory name, so ids are validated strictly before they ever touch a
// path: [A-Za-z0-9._-]{1,128}, and never "." or "..".
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// ErrInvalidSessionID is returned for ids that could not safely name a
// directory.
var ErrInvalidSessionID = errcode.New(errcode.InvalidRequest, "invalid session id")

// ErrNotFound is returned when a session has no workspace.
var ErrNotFound = errcode.New(errcode.NotFound, "session not found")

var sessionIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidateSessionID reports whether id may name a session.
func ValidateSessionID(id string) error {
	if !sessionIDRe.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("%w: must match [A-Za-z0-9._-]{1,128}, dot and dot-dot excluded", ErrInvalidSessionID)
	}
	return nil
}

// Workspaces is the set of session directories under one root.
type Workspaces struct {
	root string
}

// Info describes one session's workspace.
type Info struct {
	SessionID string
	Dir       string
	Created   time.Time
}

// New creates root if needed. The root is 0711: the sandbox user may enter a
// session directory it is given, but cannot list the root to discover other
// sessions.
func New(root string) (*Workspaces, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	if err := os.Chmod(abs, 0o711); err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	return &Workspaces{root: abs}, nil
}

// Root is the directory holding all session workspaces.
func (w *Workspaces) Root() string { return w.root }

// Ensure returns the session's directory, creating it on first use.
func (w *Workspaces) Ensure(_ context.Context, sessionID string) (string, error) {
	if err := ValidateSessionID(sessionID); err != nil {
		return "", err
	}
	dir := filepath.Join(w.root, sessionID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create workspace: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("stat workspace: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("workspace %s is not a directory", sessionID)
	}
	return dir, nil
}

// Get returns the session's workspace without creating it.
func (w *Workspaces) Get(_ context.Context, sessionID string) (Info, error) {
	if err := ValidateSessionID(sessionID); err != nil {
		return Info{}, err
	}
	dir := filepath.Join(w.root, sessionID)
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()) {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, sessionID)
	}
	if err != nil {
		return Info{}, fmt.Errorf("stat workspace: %w", err)
	}
	return Info{SessionID: sessionID, Dir: dir, Created: fi.ModTime()}, nil
}

// List returns the sessions with a workspace, sorted by id.
func (w *Workspaces) List(_ context.Context) ([]Info, error) {
	entries, err := os.ReadDir(w.root)
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	out := make([]Info, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() || ValidateSessionID(e.Name()) != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed while listing
		}
		out = append(out, Info{SessionID: e.Name(), Dir: filepath.Join(w.root, e.Name()), Created: fi.ModTime()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	return out, nil
}

// Remove deletes the session's workspace. Removing one that does not exist
// is not an error: DELETE is idempotent.
func (w *Workspaces) Remove(_ context.Context, sessionID string) error {
	if err := ValidateSessionID(sessionID); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(w.root, sessionID)); err != nil {
		return fmt.Errorf("remove workspace: %w", err)
	}
	return nil
}
