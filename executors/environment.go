package executors

import (
	"fmt"
	"os"
	"path/filepath"
)

// The environment every backend gives the code it runs (DESIGN.md §6):
// whatever the isolation, a program sees the same paths, names and
// variables, and can tell backends apart only by what it is forbidden to
// do. executortest's Fingerprint case compares each backend against one
// golden file, so a difference fails the backend that has it.
const (
	// WorkspaceMount is where the session workspace appears, and the cwd
	// and HOME of every run.
	WorkspaceMount = "/workspace"
	// CodeDir holds the program files, outside the workspace (an agent's
	// ls and grep must not find them): a run's program is
	// CodeDir/<request id>.<ext>, its argv[0] and __file__.
	CodeDir = "/run/sandgate/code"
	// Hostname is the name every sandbox reports, never the host's.
	Hostname = "sandbox"
	// HostsFile is /etc/hosts in every sandbox: localhost only, as the
	// exported runtime root has it (scripts/images.sh etc_files). Runs
	// have no network names to resolve.
	HostsFile = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	// ResolvConf is /etc/resolv.conf in every sandbox: empty. Runs have
	// no resolver (egress, when granted, goes through a proxy that
	// resolves), and the host's must not show through.
	ResolvConf = ""
	// SandboxPATH is the code's PATH.
	SandboxPATH = "/usr/local/bin:/usr/bin:/bin"
	// SandboxLang gives Python and Node UTF-8 standard streams.
	SandboxLang = "C.UTF-8"
)

// NetworkFiles are the /etc files a container backend bind-mounts,
// read-only, over its engine's own (which name the host's resolver), by
// name under /etc.
var NetworkFiles = map[string]string{"hosts": HostsFile, "resolv.conf": ResolvConf}

// WriteNetworkFiles writes NetworkFiles into dir, world-readable.
func WriteNetworkFiles(dir string) error {
	for name, content := range NetworkFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("network files: %w", err)
		}
	}
	return nil
}

// ProgramPath is where a run's program file is, as the code sees it.
func ProgramPath(requestID, lang string) string {
	return CodeDir + "/" + requestID + "." + ProgramExt(lang)
}

// ProgramExt is the file extension of a language's program files.
func ProgramExt(lang string) string {
	switch lang {
	case LangPython:
		return "py"
	case LangJavaScript:
		return "js"
	}
	return "sh"
}

// BaseEnv is the environment of every run, before anything a run adds
// (the egress proxy's variables): the same keys and values in every
// backend. PWD is the shell's business (bash sets it) and HOSTNAME is set
// here because Docker sets it in every container.
func BaseEnv() []string { return Env(SandboxPATH, SandboxLang) }

// Env is BaseEnv with a backend's configured PATH and LANG.
func Env(path, lang string) []string {
	return []string{
		"PATH=" + path,
		"HOME=" + WorkspaceMount,
		"LANG=" + lang,
		"HOSTNAME=" + Hostname,
		"NODE_PATH=" + WorkspaceMount + "/node_modules",
	}
}
