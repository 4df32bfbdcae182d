package risk

import (
	"regexp"
	"strings"
)

var bashLang = language{raw: newRawSet(append(bashRaw, langRaw("bash")...)), analyze: analyzeBash}

// maxBashDepth bounds recursion into $(..), `..`, eval and sh -c strings.
const maxBashDepth = 8

// bashState is shared by a script and every nested script in it.
type bashState struct {
	a     *analysis
	proof bashProof
}

func analyzeBash(a *analysis) {
	st := &bashState{a: a, proof: bashProof{ok: true}}
	st.script(a.src.orig, 0, 1, 0)
	a.rawPatterns()
	if a.c.empty() && st.proof.finish() {
		a.proven = true
	}
}

// script lexes and walks src from lo; line is the line number of src[lo].
func (st *bashState) script(src string, lo, line, depth int) {
	if depth > maxBashDepth {
		st.proof.ok = false
		return
	}
	bufp := getTokens()
	lx := lexBash(src, lo, line, (*bufp)[:0])
	if lx.bad {
		st.proof.ok = false
	}
	w := &bashWalker{st: st, toks: lx.toks, depth: depth}
	w.walk()
	*bufp = lx.toks
	putTokens(bufp)
	for _, s := range lx.subs {
		if s.arith {
			st.proof.arith(src[s.lo:s.hi])
			continue
		}
		st.script(src[:s.hi], s.lo, s.line, depth+1)
	}
}

type stageKind uint8

const (
	stOther stageKind = iota
	stDownload
	stDecode
	stShell
)

type stage struct {
	kind stageKind
	line int
}

// bashWalker splits a token stream into simple commands and pipelines.
type bashWalker struct {
	st     *bashState
	toks   []token
	depth  int
	words  []int
	pipe   []stage
	inCase bool
}

func (w *bashWalker) hit(id string, line int32) { w.st.a.c.add(id, int(line)) }

func (w *bashWalker) walk() {
	for i := 0; i < len(w.toks); i++ {
		i = w.command(i)
		if i >= len(w.toks) {
			break
		}
		t := &w.toks[i]
		switch {
		case t.kind == tkString:
			if t.flags&(bwParamComplex|bwUnterminated) != 0 {
				w.st.proof.ok = false
			}
		case t.is("|") || t.is("|&"):
		case t.is("&"):
			w.st.proof.ok = false
			w.endPipeline()
		default:
			w.endPipeline()
		}
	}
	w.endPipeline()
}

func (w *bashWalker) isWord(i int) bool {
	return i < len(w.toks) && w.toks[i].kind == tkIdent
}

func (w *bashWalker) isOp(i int, op string) bool {
	return i < len(w.toks) && w.toks[i].is(op)
}

// command parses one simple command at i (after reserved words) and
// returns the index of the token that ended it.
func (w *bashWalker) command(i int) int {
	i = w.reserved(i)
	if w.isWord(i) && w.isOp(i+1, "(") && w.isOp(i+2, ")") {
		w.st.proof.defineFunc(w.toks[i].val)
		return i + 3
	}
	w.words = w.words[:0]
	assigning := true
	for i < len(w.toks) {
		t := &w.toks[i]
		if t.flags&bwANSIEscape != 0 {
			w.hit("bash.obfuscation.ansi_c_quote", t.line)
		}
		switch {
		case t.kind == tkIdent && assigning && isAssignment(t):
			w.assignment(t)
		case t.kind == tkIdent:
			assigning = false
			w.words = append(w.words, i)
		case t.kind == tkOp && isRedirect(t):
			w.redirect(i)
			if w.isWord(i + 1) {
				i++
			}
		default:
			if len(w.words) > 0 {
				w.simple()
			}
			return i
		}
		i++
	}
	if len(w.words) > 0 {
		w.simple()
	}
	return i
}

// reserved skips reserved words at the start of a command, handling the
// ones with structure of their own.
func (w *bashWalker) reserved(i int) int {
	for w.isWord(i) {
		t := &w.toks[i]
		if w.inCase && w.casePattern(i) {
			i = w.skipTo(i, ")") + 1
			continue
		}
		if t.flags != 0 {
			return i
		}
		switch t.val {
		case "if", "then", "elif", "else", "fi", "do", "done", "while", "until", "{", "}", "!":
			i++
		case "esac":
			w.inCase = false
			i++
		case "for":
			return w.forClause(i)
		case "case":
			w.st.proof.ok = false
			w.inCase = true
			i = w.skipToWord(i, "in") + 1
		case "function":
			if w.isWord(i + 1) {
				w.st.proof.defineFunc(w.toks[i+1].val)
			}
			i += 2
			if w.isOp(i, "(") && w.isOp(i+1, ")") {
				i += 2
			}
		case "[[":
			w.st.proof.ok = false
			return w.skipToWord(i, "]]") + 1
		case "select", "coproc", "time":
			w.st.proof.ok = false
			i++
		default:
			return i
		}
	}
	return i
}

func (w *bashWalker) casePattern(i int) bool {
	for k := i; k < len(w.toks); k++ {
		t := &w.toks[k]
		if t.is(")") {
			return true
		}
		if t.kind != tkIdent && !t.is("|") && !t.is("(") {
			return false
		}
	}
	return false
}

func (w *bashWalker) skipTo(i int, op string) int {
	for i < len(w.toks) && !w.toks[i].is(op) {
		i++
	}
	return i
}

func (w *bashWalker) skipToWord(i int, word string) int {
	for i < len(w.toks) && !(w.toks[i].kind == tkIdent && w.toks[i].val == word) && w.toks[i].kind != tkNewline {
		i++
	}
	return i
}

// forClause handles "for NAME in words" and "for ((...))"; it returns the
// index of the separator before "do".
func (w *bashWalker) forClause(i int) int {
	if !w.isWord(i + 1) {
		return i + 1
	}
	if w.toks[i+1].flags&bwArith != 0 {
		w.st.proof.arithCommand(w.toks[i+1].text)
		return i + 2
	}
	name := w.toks[i+1].val
	j := i + 2
	numeric := true
	if w.isWord(j) && w.toks[j].val == "in" {
		for j++; w.isWord(j); j++ {
			t := &w.toks[j]
			w.st.proof.arg(t)
			numeric = numeric && (isNumber(t.val) || t.flags == bwBrace && isNumericBrace(t.val))
		}
	}
	w.st.proof.assign(name, numeric)
	return j
}

func isAssignment(t *token) bool {
	s := t.text
	j := 0
	for j < len(s) && isIdentASCII(s[j]) {
		j++
	}
	if j == 0 || isDigit(s[0]) || j >= len(s) {
		return false
	}
	if s[j] == '[' {
		k := strings.IndexByte(s[j:], ']')
		if k < 0 {
			return false
		}
		j += k + 1
	}
	return strings.HasPrefix(s[j:], "=") || strings.HasPrefix(s[j:], "+=")
}

func (w *bashWalker) assignment(t *token) {
	name, value, _ := strings.Cut(t.val, "=")
	name = strings.TrimSuffix(name, "+")
	if strings.ContainsAny(name, "[]") || bashSpecialVars[name] || strings.HasPrefix(name, "LD_") {
		w.st.proof.ok = false
	}
	w.st.proof.arg(t)
	_, raw, _ := strings.Cut(t.text, "=")
	numeric := isNumber(value) && t.flags == 0 || isArithOnly(raw)
	w.st.proof.assign(name, numeric)
}

// bashSpecialVars change how later commands are found or run (PATH could
// point seq at an executable planted in the workspace by an earlier run).
var bashSpecialVars = setOf("PATH", "IFS", "BASH_ENV", "ENV", "PS4", "PROMPT_COMMAND", "SHELLOPTS",
	"BASHOPTS", "GLOBIGNORE", "CDPATH", "BASH_LOADABLES_PATH", "EXECIGNORE", "FPATH", "HOME", "PWD", "OLDPWD")

var redirectOps = setOf("<", ">", ">>", "<<", "<<-", "<<<", "<&", ">&", "<>", ">|", "&>", "&>>")

func isRedirect(t *token) bool { return redirectOps[t.val] }

func isWriteRedirect(op string) bool {
	switch op {
	case ">", ">>", ">|", "&>", "&>>", "<>", ">&":
		return true
	}
	return false
}

var blockDevice = regexp.MustCompile(`^/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|mapper/|loop|mem|kmem|port)`)

func (w *bashWalker) redirect(i int) {
	op := &w.toks[i]
	if !w.isWord(i + 1) {
		return
	}
	t := &w.toks[i+1]
	w.st.proof.redirect(op.val, t)
	if !isWriteRedirect(op.val) || t.flags&(bwParam|bwParamComplex|bwCmdSub) != 0 {
		return
	}
	target := strings.ToLower(t.val)
	if op.val == ">&" && (isNumber(target) || target == "-") {
		return
	}
	switch {
	case blockDevice.MatchString(target):
		w.hit("bash.disk.write_device", t.line)
	case strings.HasPrefix(target, "/dev/tcp/") || strings.HasPrefix(target, "/dev/udp/"):
		w.hit("bash.net.dev_tcp", t.line)
	default:
		if id := classifyWritePath("bash", target); id != "" {
			w.hit(id, t.line)
		}
		w.persistTarget(target, t.line)
	}
}

func (w *bashWalker) persistTarget(path string, line int32) {
	for _, p := range []string{"cron", "authorized_keys", ".bashrc", ".profile", ".bash_profile", ".zshrc", "/etc/systemd/", "rc.local"} {
		if strings.Contains(path, p) {
			w.hit("bash.persist.cron", line)
			return
		}
	}
}

// endPipeline reports a download or decode stage feeding a shell stage.
func (w *bashWalker) endPipeline() {
	var down, dec bool
	for _, s := range w.pipe {
		switch s.kind {
		case stDownload:
			down = true
		case stDecode:
			dec = true
		case stShell:
			if down {
				w.hit("bash.net.curl_pipe_shell", int32(s.line))
			}
			if dec {
				w.hit("bash.obfuscation.base64_exec", int32(s.line))
			}
		}
	}
	w.pipe = w.pipe[:0]
}

func isNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) && s[i] != '.' {
			return false
		}
	}
	return true
}

func isNumericBrace(s string) bool {
	body := strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	for _, part := range strings.FieldsFunc(body, func(r rune) bool { return r == ',' || r == '.' }) {
		if !isNumber(part) {
			return false
		}
	}
	return strings.HasPrefix(s, "{")
}

// isArithOnly reports a value that is exactly one $((...)).
func isArithOnly(raw string) bool {
	if !strings.HasPrefix(raw, "$((") || !strings.HasSuffix(raw, "))") {
		return false
	}
	line := 0
	end, ok := skipParens(raw, 2, &line)
	return ok && end == len(raw)
}

// bashRaw are matched on the lowercase text in addition to the shared shell
// payloads; most bash checks are on tokens (commands, redirects, pipelines).
var bashRaw = []rawPattern{
	{id: "bash.obfuscation.ifs", needles: []string{"${ifs", "$ifs"}},
	{id: "bash.persist.cron", needles: []string{"crontab", "/etc/cron", "/var/spool/cron", "systemctl", "authorized_keys"},
		re: regexp.MustCompile(`\bcrontab\s+(?:-[a-z]*\s+)*[^-\s]|\|\s*crontab\b|/etc/cron|/var/spool/cron|\bsystemctl\s+(?:--\S+\s+)*enable\b|>>?\s*\S*authorized_keys`)},
}
