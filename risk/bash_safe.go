package risk

import "strings"

// The bash allowlist: builtins that only print or compute. Everything else,
// including every external program, leaves the script unproven (LOW).
var bashAllowed = setOf("echo", "printf", "true", "false", "test", "[", "expr", "seq", ":", "exit", "return")

// Flags an argument may carry in a proven script: quoting, simple
// parameters, command substitutions (whose bodies are proven on their own),
// arithmetic (checked by arith) and brace expansion.
const bashArgOK = bwQuoted | bwBackslash | bwParam | bwCmdSub | bwArith | bwBrace | bwNonASCII

// bashProof accumulates the SAFE proof over a script and its nested scripts.
//
// The subtle part is arithmetic: bash evaluates variable values inside
// $((..)) recursively, and an array subscript there runs command
// substitutions (x='a[$(id)]'; echo $((x)) runs id). So every name used in
// arithmetic must never be assigned anything but numbers or arithmetic.
type bashProof struct {
	ok         bool
	funcs      map[string]bool
	needFuncs  []string
	nonNumeric map[string]bool
	arithNames []string
}

func (p *bashProof) defineFunc(name string) {
	if p.funcs == nil {
		p.funcs = map[string]bool{}
	}
	p.funcs[name] = true
	if bashAllowed[name] || shells[name] {
		p.ok = false // redefining a builtin changes what the proof checked
	}
}

func (p *bashProof) assign(name string, numeric bool) {
	if numeric {
		return
	}
	if p.nonNumeric == nil {
		p.nonNumeric = map[string]bool{}
	}
	p.nonNumeric[name] = true
}

func (p *bashProof) arg(t *token) {
	if t.flags&^bashArgOK != 0 {
		p.ok = false
	}
}

// redirect allows fd duplication, /dev/null and the standard streams, and
// plain relative paths that do not climb out of the working directory.
func (p *bashProof) redirect(op string, t *token) {
	switch op {
	case "<<", "<<-":
		return
	case "<<<":
		p.arg(t)
		return
	case "<>":
		p.ok = false
		return
	}
	v := t.val
	switch {
	case t.flags != 0:
		p.ok = false
	case (op == ">&" || op == "<&") && (isNumber(v) || v == "-"):
	case v == "/dev/null" || v == "/dev/stdout" || v == "/dev/stderr":
	case v == "" || strings.HasPrefix(v, "/") || strings.HasPrefix(v, "~") || strings.HasPrefix(v, "-") || escapesCwd(v):
		p.ok = false
	}
}

// simple checks one command: a plain allowlisted (or user-defined) name and
// arguments without globs, $'..', process substitution or complex ${..}.
func (p *bashProof) simple(toks []token, words []int) {
	cw := &toks[words[0]]
	if cw.flags != 0 {
		p.ok = false
		return
	}
	name := cw.val
	if !bashAllowed[name] {
		p.needFuncs = append(p.needFuncs, name)
	}
	for _, k := range words[1:] {
		t := &toks[k]
		p.arg(t)
		switch name {
		case "printf", "test", "[":
			if t.val == "-v" { // printf -v / test -v evaluate array subscripts
				p.ok = false
			}
		case "seq", "exit", "return":
			if !isNumber(t.val) && t.val != "-w" {
				p.ok = false
			}
		}
	}
}

// arithCommand checks "((...))" text.
func (p *bashProof) arithCommand(text string) {
	body := strings.TrimSuffix(strings.TrimPrefix(text, "(("), "))")
	p.arith(body)
}

// arith checks an arithmetic body: only numbers, operators and names, and
// remembers the names for finish.
func (p *bashProof) arith(body string) {
	for i := 0; i < len(body); {
		c := body[i]
		switch {
		case isIdentStartASCII(c):
			j := i
			for j < len(body) && isIdentASCII(body[j]) {
				j++
			}
			p.arithNames = append(p.arithNames, body[i:j])
			i = j
		case isDigit(c):
			for i < len(body) && isIdentASCII(body[i]) {
				i++
			}
		case c == '$' && (i+1 >= len(body) || !isIdentStartASCII(body[i+1])):
			p.ok = false // only $NAME: $(..) output would be evaluated again
			return
		case strings.IndexByte(" \t\n+-*/%<>=!&|^~?:(),;$", c) >= 0:
			i++
		default:
			p.ok = false
			return
		}
	}
}

func (p *bashProof) finish() bool {
	if !p.ok {
		return false
	}
	for _, n := range p.arithNames {
		if p.nonNumeric[n] {
			return false
		}
	}
	for _, f := range p.needFuncs {
		if !p.funcs[f] {
			return false
		}
	}
	return true
}
