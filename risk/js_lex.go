package risk

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// jsLexer tokenises JavaScript: // and /* */ comments, a leading #!, quotes,
// template literals with nested ${...} (a brace stack), regular expression
// literals (decided from the previous token, with a stack remembering which
// parentheses closed an if/while/for head), \u escapes in identifiers, and
// the Unicode line terminators. Where JavaScript's grammar is genuinely
// ambiguous for a tokenizer (a '/' after '}' or '++'), bad is set: the code
// is then not proven SAFE, whatever the guess.
type jsLexer struct {
	src       string
	i, line   int
	toks      []token
	braces    []byte // 't': template substitution, 'b': ordinary brace
	parens    []bool // true: parenthesis opened after if/while/for/with
	closeCond bool   // the last ')' closed such a head
	bad       bool
}

func lexJS(src string, buf []token) ([]token, bool) {
	lx := &jsLexer{src: src, line: 1, toks: buf}
	if strings.HasPrefix(src, "#!") {
		lx.lineComment()
	}
	lx.run()
	if len(lx.braces) > 0 {
		lx.bad = true
	}
	return lx.toks, lx.bad
}

func (lx *jsLexer) emit(kind tokKind, start int, text string) *token {
	lx.toks = append(lx.toks, token{text: text, pos: int32(start), line: int32(lx.line), kind: kind})
	return &lx.toks[len(lx.toks)-1]
}

func (lx *jsLexer) run() {
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		switch {
		case c == '\n':
			lx.line++
			lx.i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f':
			lx.i++
		case c == '/' && strings.HasPrefix(lx.src[lx.i:], "//"):
			lx.lineComment()
		case c == '/' && strings.HasPrefix(lx.src[lx.i:], "/*"):
			lx.blockComment()
		case c == '\'' || c == '"':
			lx.str(c)
		case c == '`':
			lx.i++
			lx.template(lx.i - 1)
		case isDigit(c) || c == '.' && lx.i+1 < len(lx.src) && isDigit(lx.src[lx.i+1]):
			lx.number()
		case isIdentStartASCII(c) || c == '$' || c == '\\' || c == '#':
			lx.ident()
		case c >= utf8.RuneSelf:
			lx.unicode()
		case c == '/':
			lx.slash()
		default:
			lx.punct()
		}
	}
}

// isLineTerminator reports \n, \r, U+2028 or U+2029 at i.
func isLineTerminator(s string, i int) bool {
	return s[i] == '\n' || s[i] == '\r' || strings.HasPrefix(s[i:], "\u2028") || strings.HasPrefix(s[i:], "\u2029")
}

func (lx *jsLexer) lineComment() {
	for lx.i < len(lx.src) && !isLineTerminator(lx.src, lx.i) {
		lx.i++
	}
}

func (lx *jsLexer) blockComment() {
	end := strings.Index(lx.src[lx.i+2:], "*/")
	if end < 0 {
		lx.bad = true
		lx.line += strings.Count(lx.src[lx.i:], "\n")
		lx.i = len(lx.src)
		return
	}
	lx.line += strings.Count(lx.src[lx.i:lx.i+2+end], "\n")
	lx.i += end + 4
}

func (lx *jsLexer) unicode() {
	r, n := utf8.DecodeRuneInString(lx.src[lx.i:])
	switch {
	case r == 0x2028 || r == 0x2029 || r == 0xFEFF || unicode.IsSpace(r):
		lx.i += n
	case isIdentRune(r):
		lx.ident()
	default:
		lx.emit(tkOther, lx.i, lx.src[lx.i:lx.i+n])
		lx.bad = true
		lx.i += n
	}
}

func (lx *jsLexer) str(q byte) {
	start, line := lx.i, lx.line
	j := lx.i + 1
	for j < len(lx.src) {
		c := lx.src[j]
		if c == '\\' {
			if j+1 < len(lx.src) && lx.src[j+1] == '\n' {
				lx.line++
			}
			j += 2
			continue
		}
		if c == q {
			t := lx.emit(tkString, start, lx.src[start:j+1])
			t.val, t.line = lx.src[start+1:j], int32(line)
			lx.i = j + 1
			return
		}
		if isLineTerminator(lx.src, j) {
			break
		}
		j++
	}
	j = min(j, len(lx.src))
	t := lx.emit(tkString, start, lx.src[start:j])
	t.val, t.line, t.flags = lx.src[start+1:j], int32(line), tfUnterminated
	lx.bad = true
	lx.i = j
}

// template scans template text from lx.i up to the closing backtick or a
// "${", emitting one string chunk; start is where the chunk's text begins.
func (lx *jsLexer) template(start int) {
	line := lx.line
	for j := lx.i; j < len(lx.src); j++ {
		switch lx.src[j] {
		case '\\':
			j++
			if j < len(lx.src) && lx.src[j] == '\n' {
				lx.line++
			}
		case '\n':
			lx.line++
		case '`':
			t := lx.emit(tkString, start, lx.src[start:j+1])
			t.val, t.line = lx.src[lx.i:j], int32(line)
			lx.i = j + 1
			return
		case '$':
			if j+1 < len(lx.src) && lx.src[j+1] == '{' {
				t := lx.emit(tkString, start, lx.src[start:j+2])
				t.val, t.line, t.flags = lx.src[lx.i:j], int32(line), tfInterp
				lx.braces = append(lx.braces, 't')
				lx.i = j + 2
				return
			}
		}
	}
	t := lx.emit(tkString, start, lx.src[start:])
	t.val, t.line, t.flags = lx.src[lx.i:], int32(line), tfUnterminated
	lx.bad = true
	lx.i = len(lx.src)
}

func (lx *jsLexer) number() {
	start := lx.i
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		if isIdentASCII(c) || c == '.' {
			lx.i++
			continue
		}
		p := lx.src[lx.i-1]
		if (c == '+' || c == '-') && (p == 'e' || p == 'E') && !strings.ContainsAny(lx.src[start:lx.i], "xXbBoO") {
			lx.i++
			continue
		}
		break
	}
	lx.emit(tkNumber, start, lx.src[start:lx.i])
}

// ident lexes an identifier, decoding \uXXXX and \u{...} escapes: to the
// engine \u0065val is eval.
func (lx *jsLexer) ident() {
	start := lx.i
	if lx.src[lx.i] == '#' {
		lx.i++
	}
	var b strings.Builder
	var flags tokFlag
	for lx.i < len(lx.src) {
		if lx.src[lx.i] == '\\' {
			if !strings.HasPrefix(lx.src[lx.i:], `\u`) {
				break
			}
			r, n := decodeEscape(lx.src[lx.i+1:])
			if flags&tfEscape == 0 {
				b.WriteString(lx.src[start:lx.i])
			}
			flags |= tfEscape
			b.WriteRune(r)
			lx.i += 1 + n
			continue
		}
		end, nonASCII := scanIdent(lx.src, lx.i, "$")
		if end == lx.i {
			break
		}
		if nonASCII {
			flags |= tfNonASCII
		}
		if flags&tfEscape != 0 {
			b.WriteString(lx.src[lx.i:end])
		}
		lx.i = end
	}
	if lx.i == start {
		lx.emit(tkOther, start, lx.src[start:start+1])
		lx.bad = true
		lx.i++
		return
	}
	text := lx.src[start:lx.i]
	if flags&tfEscape != 0 {
		text = b.String()
		lx.bad = true
	}
	if flags&tfNonASCII != 0 && norm.NFKC.String(text) != text {
		flags |= tfNFKCChanged
	}
	t := lx.emit(tkIdent, start, text)
	t.flags = flags
}

var jsRegexAfterWord = setOf("return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw",
	"case", "do", "else", "yield", "await")

// slash decides between a regular expression literal and division.
func (lx *jsLexer) slash() {
	if len(lx.toks) == 0 {
		lx.regex()
		return
	}
	p := &lx.toks[len(lx.toks)-1]
	switch {
	case p.kind == tkIdent:
		if jsRegexAfterWord[p.text] {
			lx.regex()
			return
		}
	case p.kind == tkNumber, p.kind == tkString && p.flags&tfInterp == 0:
	case p.is(")"):
		if lx.closeCond {
			lx.regex()
			return
		}
	case p.is("]"):
	case p.is("}") || p.is("++") || p.is("--"):
		lx.bad = true
	default:
		lx.regex()
		return
	}
	lx.punct()
}

func (lx *jsLexer) regex() {
	start := lx.i
	inClass := false
	for j := lx.i + 1; j < len(lx.src); j++ {
		c := lx.src[j]
		switch {
		case c == '\\':
			j++
		case isLineTerminator(lx.src, j):
			lx.bad = true
			lx.emit(tkOther, start, lx.src[start:j])
			lx.i = j
			return
		case c == '[':
			inClass = true
		case c == ']':
			inClass = false
		case c == '/' && !inClass:
			j++
			for j < len(lx.src) && isIdentASCII(lx.src[j]) {
				j++
			}
			t := lx.emit(tkString, start, lx.src[start:j])
			t.flags = tfRegex
			lx.i = j
			return
		}
	}
	lx.bad = true
	lx.i = len(lx.src)
}

var jsPuncts = []string{
	">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "??=", "=>", "==", "!=", "<=", ">=",
	"&&", "||", "??", "?.", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "**", "<<", ">>",
}

// jsPunctByFirst indexes jsPuncts (longest first) by their first byte.
var jsPunctByFirst = func() (t [256][]string) {
	for _, p := range jsPuncts {
		t[p[0]] = append(t[p[0]], p)
	}
	return t
}()

func (lx *jsLexer) punct() {
	start := lx.i
	rest := lx.src[lx.i:]
	op := rest[:1]
	for _, p := range jsPunctByFirst[rest[0]] {
		if strings.HasPrefix(rest, p) && !(p == "?." && len(rest) > 2 && isDigit(rest[2])) {
			op = p
			break
		}
	}
	if len(op) == 1 && strings.IndexByte("{}()[];,<>+-*/%&|^!~?:=.@", op[0]) < 0 {
		lx.emit(tkOther, start, op)
		lx.bad = true
		lx.i++
		return
	}
	lx.i += len(op)
	if lx.brackets(op) {
		return
	}
	lx.emit(tkOp, start, op)
}

// brackets maintains the brace and parenthesis stacks; it returns true
// when a '}' closed a template substitution and template scanning resumed.
func (lx *jsLexer) brackets(op string) bool {
	switch op {
	case "{":
		lx.braces = append(lx.braces, 'b')
	case "}":
		if n := len(lx.braces); n > 0 {
			top := lx.braces[n-1]
			lx.braces = lx.braces[:n-1]
			if top == 't' {
				lx.template(lx.i - 1)
				return true
			}
		}
	case "(":
		cond := false
		if n := len(lx.toks); n > 0 && lx.toks[n-1].kind == tkIdent {
			switch lx.toks[n-1].text {
			case "if", "while", "for", "with":
				cond = true
			}
		}
		lx.parens = append(lx.parens, cond)
	case ")":
		lx.closeCond = false
		if n := len(lx.parens); n > 0 {
			lx.closeCond = lx.parens[n-1]
			lx.parens = lx.parens[:n-1]
		}
	}
	return false
}
