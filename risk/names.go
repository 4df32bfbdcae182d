package risk

import "strings"

// dangerousExact are names that are only suspicious as a whole word when
// built from pieces ('o'+'s'); dangerousSub are long enough to look for
// inside a built string ('node:chi'+'ld_process').
var dangerousExact = map[string]bool{
	"os": true, "sys": true, "nt": true, "posix": true, "pty": true, "eval": true, "exec": true,
	"compile": true, "open": true, "system": true, "popen": true, "spawn": true, "socket": true,
	"ctypes": true, "cffi": true, "getattr": true, "setattr": true, "globals": true, "locals": true,
	"vars": true, "builtins": true, "marshal": true, "pickle": true, "loads": true, "input": true,
	"breakpoint": true, "require": true, "process": true, "function": true, "import": true,
	"vm": true, "fs": true, "net": true, "http": true, "https": true, "dgram": true, "tls": true,
	"binding": true, "dlopen": true, "module": true, "global": true, "window": true, "bash": true,
	"sh": true, "curl": true, "wget": true, "nc": true, "rm": true, "execfile": true, "fork": true,
	"cluster": true, "child": true, "prototype": true, "code": true,
}

var dangerousSub = []string{
	"subprocess", "child_process", "__import__", "import_module", "__builtins__", "__subclasses__",
	"__globals__", "__class__", "__bases__", "__base__", "__mro__", "__code__", "__proto__",
	"constructor", "fromcharcode", "mainmodule", "execsync", "spawnsync", "execfile", "globalthis",
	"runinnewcontext", "runinthiscontext", "worker_threads", "/bin/sh", "/bin/bash", "/dev/tcp",
	"getattribute", "_getframe", "os.system", "os.popen",
}

// isDangerousName reports whether a string built at run time names a
// module, builtin or property that the denylists look for.
func isDangerousName(v string) bool {
	v = strings.ToLower(strings.TrimSpace(v))
	v = strings.TrimPrefix(v, "node:")
	if dangerousExact[v] {
		return true
	}
	if len(v) < 6 {
		return false
	}
	for _, d := range dangerousSub {
		if strings.Contains(v, d) {
			return true
		}
	}
	return false
}

var systemPathPrefixes = []string{
	"/etc/", "/usr/", "/bin/", "/sbin/", "/boot/", "/lib/", "/lib64/", "/root/", "/proc/", "/sys/",
	"/var/spool/cron", "/var/run/", "/run/", "/dev/sd", "/dev/nvme", "/dev/mem",
}

var systemPathParts = []string{
	"/.ssh/", "authorized_keys", "/.bashrc", "/.profile", "/.bash_profile", "/.zshrc", "/.config/autostart",
	"/.aws/", "/.kube/", "/.docker/", "/.gnupg/", "crontab",
}

// classifyWritePath returns the id for writing to path, or "" when the
// path stays inside the working directory (or is a harmless device).
func classifyWritePath(lang, path string) string {
	path = strings.TrimSpace(path)
	switch {
	case path == "":
		return ""
	case path == "/dev/null" || path == "/dev/stdout" || path == "/dev/stderr" || strings.HasPrefix(path, "/dev/fd/"):
		return ""
	}
	// /workspace is the working directory in every executor (DESIGN.md
	// §6): a path under it, with no "..", stays inside.
	if (path == "/workspace" || strings.HasPrefix(path, "/workspace/")) && !escapesCwd(path) {
		return ""
	}
	abs := strings.HasPrefix(path, "/") || strings.HasPrefix(path, "~") || strings.HasPrefix(path, "$home") ||
		strings.HasPrefix(path, "${home}") || strings.HasPrefix(path, `\\`) || len(path) > 2 && path[1] == ':'
	if !abs && !escapesCwd(path) {
		return ""
	}
	p := "/" + strings.TrimLeft(path, "~/")
	for _, s := range systemPathPrefixes {
		if strings.HasPrefix(path, s) {
			return lang + ".fs.write_system"
		}
	}
	for _, s := range systemPathParts {
		if strings.Contains(p, s) {
			return lang + ".fs.write_system"
		}
	}
	return lang + ".fs.write_outside_cwd"
}

// escapesCwd reports a relative path with a ".." component.
func escapesCwd(path string) bool {
	for _, seg := range strings.FieldsFunc(path, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == ".." {
			return true
		}
	}
	return false
}
