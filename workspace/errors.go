package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/sandgate/sandgate/errcode"
)

// Errors of the file operations. Each carries its stable code; the messages
// are fixed phrases that are safe to show a client.
var (
	ErrFileNotFound  = errcode.New(errcode.NotFound, "no such file or directory in the workspace")
	ErrIsDir         = errcode.New(errcode.InvalidRequest, "the path is a directory")
	ErrNotDir        = errcode.New(errcode.InvalidRequest, "a component of the path is not a directory")
	ErrNotRegular    = errcode.New(errcode.InvalidRequest, "the path is not a regular file")
	ErrSymlinkLoop   = errcode.New(errcode.InvalidRequest, "too many levels of symbolic links")
	ErrExists        = errcode.New(errcode.Conflict, "the file already exists (mode=create)")
	ErrNotEmpty      = errcode.New(errcode.Conflict, "the directory is not empty; pass recursive=true")
	ErrRootPath      = errcode.New(errcode.InvalidRequest, "the operation needs a path inside the workspace, not the workspace itself")
	ErrFileTooLarge  = errcode.New(errcode.FileTooLarge, "the file exceeds the size limit")
	ErrQuotaExceeded = errcode.New(errcode.QuotaExceeded, "the write would exceed the session's workspace quota")
	// ErrNoSpace is the workspaces' filesystem full (ENOSPC): the
	// operator's disk, not the session's quota. What was being written is
	// removed (Write writes to a temporary file and renames it).
	ErrNoSpace       = errcode.New(errcode.InsufficientStorage, "the workspace filesystem is full")
	ErrBinaryFile    = errcode.New(errcode.BinaryFile, "the file is binary; use the raw content endpoint")
	ErrEditNoMatch   = errcode.New(errcode.EditNoMatch, "the old string does not occur in the file")
	ErrEditAmbiguous = errcode.New(errcode.EditAmbiguous, "the old string occurs more than once; make it unique or set replace_all")
	ErrEditEmptyOld  = errcode.New(errcode.InvalidRequest, "the old string must not be empty")
	ErrOffsetPastEnd = errcode.New(errcode.InvalidRequest, "offset is past the end of the file")
	ErrBadPattern    = errcode.New(errcode.InvalidRequest, "the pattern is not valid")
	ErrBadMode       = errcode.New(errcode.InvalidRequest, "mode must be one of: overwrite, create, append")
	ErrForbidden     = errcode.New(errcode.Forbidden, "permission denied")
)

// errEscapes is os.Root's unexported "path escapes from parent" error. It
// is captured once from a real Root (a leading "/" is refused before any
// file system access), so that a symlink leading out is told apart by
// identity, never by its text.
var errEscapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot("/")
	if err != nil {
		return errors.New("workspace: os.Root escape error not captured")
	}
	defer r.Close()
	_, err = r.Lstat("/")
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return errors.New("workspace: os.Root escape error not captured")
})

// mapErr gives an error from the os package its client-facing meaning.
// The original stays in the chain for logs; errcode.Of shows only the
// sentinel's message, never a host path.
func mapErr(err error) error {
	var sentinel *errcode.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &sentinel):
		return err // already ours
	case errors.Is(err, errEscapes()):
		return traversal(errTraversalSymlink, err.Error())
	case errors.Is(err, syscall.ENAMETOOLONG):
		return traversal(errTraversalLong, err.Error())
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w", ErrFileNotFound, err)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %w", ErrNotDir, err)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %w", ErrIsDir, err)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: %w", ErrSymlinkLoop, err)
	case errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("%w: %w", ErrNotEmpty, err)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%w: %w", ErrExists, err)
	case errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %w", ErrQuotaExceeded, err)
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	case errors.Is(err, syscall.EFBIG):
		return fmt.Errorf("%w: %w", ErrFileTooLarge, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	return err // internal: EIO... are the operator's problem
}
