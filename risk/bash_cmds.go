package risk

import (
	"path"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// simple analyses one simple command held in w.words.
func (w *bashWalker) simple() {
	words := w.words
	first := &w.toks[words[0]]
	if first.flags&bwArith != 0 && strings.HasPrefix(first.text, "((") {
		w.st.proof.arithCommand(first.text)
		return
	}
	w.commandWord(first)
	w.st.proof.simple(w.toks, words)
	for k := 0; k < 6 && len(words) > 0; k++ {
		name := cmdName(w.toks[words[0]].val)
		w.st.a.calls = append(w.st.a.calls, name)
		rest, wrapped := w.wrapper(name, words)
		if !wrapped {
			w.classify(name, words)
			return
		}
		words = rest
	}
}

// cmdName is the command as bash resolves it: quotes removed, any
// directory stripped (/usr/bin/curl is curl), lowercase.
func cmdName(v string) string {
	return strings.ToLower(path.Base(strings.TrimSpace(v)))
}

// commandWord flags a command name that is computed rather than written.
func (w *bashWalker) commandWord(t *token) {
	f := t.flags
	switch {
	case f&(bwParam|bwParamComplex|bwCmdSub|bwArith) != 0:
		w.hit("bash.obfuscation.var_command", t.line)
	case f&bwANSIC != 0:
		w.hit("bash.obfuscation.encoded_command", t.line)
	case f&(bwQuoted|bwBackslash) != 0:
		w.hit("bash.obfuscation.quote_split", t.line)
	}
	if f&bwGlob != 0 {
		w.hit("bash.obfuscation.glob_command", t.line)
	}
	if f&bwBrace != 0 {
		w.hit("bash.obfuscation.brace_command", t.line)
	}
	if f&bwNonASCII != 0 {
		if norm.NFKC.String(t.val) != t.val {
			w.hit("obfuscation.nfkc_identifier", t.line)
		} else {
			w.hit("obfuscation.non_ascii_identifier", t.line)
		}
	}
}

// wrapper recognises commands that run another command, reports what the
// wrapper itself means, and returns the wrapped command's words.
func (w *bashWalker) wrapper(name string, words []int) ([]int, bool) {
	line := w.toks[words[0]].line
	skip := 0 // positional arguments the wrapper consumes before the command
	switch name {
	case "sudo", "doas", "pkexec", "runuser":
		w.hit("bash.priv.sudo", line)
	case "su":
		w.hit("bash.priv.sudo", line)
		w.inlineScript(words, "-c")
		return nil, false
	case "nohup", "setsid", "disown":
		w.hit("bash.process.detach", line)
	case "chroot", "nsenter", "unshare":
		w.hit("bash.escape.container", line)
		if name == "chroot" {
			skip = 1
		}
	case "timeout", "flock":
		skip = 1
	case "env", "nice", "ionice", "stdbuf", "xargs", "exec", "command", "builtin", "time", "busybox",
		"strace", "ltrace", "caffeinate", "unbuffer", "taskset":
	case "watch":
		w.inlineScript(words, "")
		return nil, false
	default:
		return nil, false
	}
	rest := words[1:]
	for len(rest) > 0 {
		v := w.toks[rest[0]].val
		switch {
		case strings.HasPrefix(v, "-"):
			if (name == "sudo" || name == "doas") && (v == "-u" || v == "-g" || v == "-C" || v == "-p" || v == "-h") {
				rest = rest[1:]
			}
		case strings.Contains(v, "=") && name == "env", name == "taskset" && skip == 0 && isNumber(v):
		case skip > 0:
			skip--
		default:
			return rest, true
		}
		if len(rest) > 0 {
			rest = rest[1:]
		}
	}
	return rest, len(rest) > 0
}

// inlineScript analyses the literal argument after flag (or the first
// argument when flag is "") as a nested script.
func (w *bashWalker) inlineScript(words []int, flag string) {
	for k := 1; k < len(words); k++ {
		t := &w.toks[words[k]]
		if flag != "" && t.val != flag {
			continue
		}
		if flag != "" {
			k++
		}
		if k < len(words) {
			s := &w.toks[words[k]]
			if s.flags&(bwParam|bwParamComplex|bwCmdSub) == 0 {
				w.st.script(s.val, 0, int(s.line), w.depth+1)
			}
		}
		return
	}
}

var shells = setOf("sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "ash", "mksh", "yash")

var interpreters = setOf("python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua",
	"deno", "bun", "pwsh", "powershell", "osascript", "tclsh", "rscript", "julia")

func isInterpreter(name string) bool {
	if interpreters[name] {
		return true
	}
	return strings.HasPrefix(name, "python") && isNumber(strings.TrimPrefix(name, "python"))
}

// classify checks a (possibly unwrapped) command and records its pipeline role.
func (w *bashWalker) classify(name string, words []int) {
	line := w.toks[words[0]].line
	kind := stOther
	switch {
	case shells[name] || isInterpreter(name):
		kind = w.shellLike(name, words)
	case name == "source" || name == ".":
		kind = w.source(words)
	case name == "eval":
		w.hit("bash.eval.eval", line)
		for _, k := range words[1:] {
			if t := &w.toks[k]; t.flags&(bwParam|bwParamComplex|bwCmdSub) == 0 {
				w.st.script(t.val, 0, int(t.line), w.depth+1)
			}
		}
	case name == "curl" || name == "wget" || name == "aria2c" || name == "fetch" || name == "http" || name == "lwp-request":
		w.hit("bash.net.http_client", line)
		kind = stDownload
	case name == "base64" && w.hasArg(words, "-d", "--decode", "-D") || name == "xxd" && w.hasFlagLetter(words, 'r') ||
		name == "openssl" && w.hasArg(words, "-d") || name == "uudecode" || name == "gunzip" || name == "zcat":
		kind = stDecode
	default:
		w.classifyOther(name, words, line)
	}
	w.pipe = append(w.pipe, stage{kind, int(line)})
}

// shellLike handles shells and interpreters: with -c/-e they run an inline
// string; with no script argument they read code from stdin.
func (w *bashWalker) shellLike(name string, words []int) stageKind {
	line := w.toks[words[0]].line
	inline := "-c"
	if !shells[name] {
		inline = ""
		for _, f := range []string{"-c", "-e", "-r", "-E", "--eval", "-p"} {
			if w.hasArg(words, f) {
				inline = f
			}
		}
		if inline != "" {
			w.hit("bash.process.interpreter_inline", line)
			return stOther
		}
	} else if w.hasArg(words, "-c") {
		w.hit("bash.process.shell_c", line)
		w.inlineScript(words, "-c")
		return stOther
	}
	for _, k := range words[1:] {
		if v := w.toks[k].val; v != "-" && v != "-s" && !strings.HasPrefix(v, "-") {
			return stOther // runs a script file
		}
	}
	return stShell
}

func (w *bashWalker) source(words []int) stageKind {
	if len(words) < 2 {
		return stOther
	}
	t := &w.toks[words[1]]
	v := strings.ToLower(t.val)
	if t.flags&(bwParam|bwParamComplex|bwCmdSub|bwProcSub) != 0 || v == "/dev/stdin" || v == "-" ||
		strings.Contains(v, "://") {
		w.hit("bash.eval.source_dynamic", t.line)
		if v == "/dev/stdin" || v == "-" {
			return stShell
		}
	}
	return stOther
}

func (w *bashWalker) hasArg(words []int, args ...string) bool {
	for _, k := range words[1:] {
		for _, a := range args {
			if w.toks[k].val == a {
				return true
			}
		}
	}
	return false
}

// hasFlagLetter reports a short option cluster containing c (-rf has 'r').
func (w *bashWalker) hasFlagLetter(words []int, c byte) bool {
	for _, k := range words[1:] {
		v := w.toks[k].val
		if len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.IndexByte(v, c) >= 0 {
			return true
		}
	}
	return false
}
