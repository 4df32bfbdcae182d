package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"syscall"

	"github.com/sandgate/sandgate/executors"
)

// programName is what a RunExtension.Program may be: a request id, as the
// gateway's prologue checks it. It names a file, so no separators.
var programName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// errProgramDir means the container has no program directory: an image or
// container configuration older than this sandboxd. The run fails rather
// than run differently from every other backend.
var errProgramDir = errors.New("no program directory " + executors.CodeDir)

// stageProgram writes text to the run's program file when the gateway
// asked for one (x.Program) and returns its path and a cleanup; ok is
// false for a plain AIO call, which keeps the AIO API's behaviour (code on
// stdin, a command line for bash).
func stageProgram(x *runExtension, lang, text string) (path string, cleanup func(), ok bool, err error) {
	if x == nil || x.Program == "" {
		return "", nil, false, nil
	}
	if !programName.MatchString(x.Program) {
		return "", nil, true, fmt.Errorf("invalid program name %q", x.Program)
	}
	if fi, err := os.Stat(executors.CodeDir); err != nil || !fi.IsDir() {
		return "", nil, true, errProgramDir
	}
	path = executors.ProgramPath(x.Program, lang)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return "", nil, true, fmt.Errorf("create the program file: %w", err)
	}
	_, werr := f.WriteString(text)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	cleanup = func() { _ = os.Remove(path) }
	if werr != nil {
		cleanup()
		return "", nil, true, fmt.Errorf("write the program file: %w", werr)
	}
	return path, cleanup, true, nil
}

// programArgv is how every backend runs a program file of lang.
func programArgv(lang, path string) []string {
	switch lang {
	case executors.LangPython:
		return []string{"python3", "-I", "-u", path}
	case executors.LangJavaScript:
		return []string{"node", path}
	}
	return []string{"bash", "--noprofile", "--norc", path}
}
