package risk

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// maxInterpDepth bounds recursion into f-string replacement fields
// (f"{f'{x}'}"); deeper nesting is legal Python but only ever obfuscation,
// so the lexer stops and marks the input unprovable.
const maxInterpDepth = 4

// pyLexer tokenises Python: comments, all string prefixes (r, b, u, f, t and
// their pairs), triple quotes, f-string replacement fields (PEP 701 nested
// quotes included), line continuations, and bracket depth so that newlines
// inside brackets do not end a statement. Identifiers are NFKC-normalised
// like the Python parser does. Anything it does not understand sets bad,
// which only means "no SAFE proof", never an error.
type pyLexer struct {
	src    string
	i      int
	line   int
	depth  int
	idepth int
	toks   []token
	bad    bool
}

func lexPython(src string, buf []token) ([]token, bool) {
	lx := &pyLexer{src: src, line: 1, toks: buf}
	lx.run()
	return lx.toks, lx.bad
}

func (lx *pyLexer) emit(kind tokKind, start int, text string) *token {
	lx.toks = append(lx.toks, token{text: text, pos: int32(start), line: int32(lx.line), kind: kind})
	return &lx.toks[len(lx.toks)-1]
}

func (lx *pyLexer) newline() {
	if lx.depth == 0 && len(lx.toks) > 0 && lx.toks[len(lx.toks)-1].kind != tkNewline {
		lx.emit(tkNewline, lx.i, "\n")
	}
}

func (lx *pyLexer) run() {
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		switch {
		case c == '\n':
			lx.newline()
			lx.line++
			lx.i++
		case c == '\r':
			// CRLF is one newline; a lone CR is a newline to Python too.
			if lx.i+1 >= len(lx.src) || lx.src[lx.i+1] != '\n' {
				lx.newline()
			}
			lx.i++
		case c == ' ' || c == '\t' || c == '\f':
			lx.i++
		case c == '#':
			lx.skipComment()
		case c == '\\':
			lx.continuation()
		case isDigit(c) || c == '.' && lx.i+1 < len(lx.src) && isDigit(lx.src[lx.i+1]):
			lx.number()
		case c == '"' || c == '\'':
			lx.str(lx.i, lx.i, "")
		case isIdentStartASCII(c) || c >= 0x80:
			lx.ident()
		default:
			lx.op()
		}
	}
	lx.newline()
}

func (lx *pyLexer) skipComment() {
	for lx.i < len(lx.src) && lx.src[lx.i] != '\n' && lx.src[lx.i] != '\r' {
		lx.i++
	}
}

func (lx *pyLexer) continuation() {
	rest := lx.src[lx.i+1:]
	switch {
	case strings.HasPrefix(rest, "\n"):
		lx.i += 2
		lx.line++
	case strings.HasPrefix(rest, "\r\n"):
		lx.i += 3
		lx.line++
	default:
		lx.emit(tkOther, lx.i, "\\")
		lx.bad = true
		lx.i++
	}
}

func (lx *pyLexer) number() {
	start := lx.i
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		if isIdentASCII(c) || c == '.' {
			lx.i++
			continue
		}
		prev := lx.src[lx.i-1]
		if (c == '+' || c == '-') && (prev == 'e' || prev == 'E') && !strings.ContainsAny(lx.src[start:lx.i], "xX") {
			lx.i++
			continue
		}
		break
	}
	lx.emit(tkNumber, start, lx.src[start:lx.i])
}

func (lx *pyLexer) ident() {
	start := lx.i
	end, nonASCII := scanIdent(lx.src, lx.i, "")
	if end == start { // a non-ASCII rune that is not an identifier character
		_, n := utf8.DecodeRuneInString(lx.src[start:])
		lx.i += n
		lx.emit(tkOther, start, lx.src[start:lx.i])
		lx.bad = true
		return
	}
	lx.i = end
	word := lx.src[start:end]
	if end < len(lx.src) && (lx.src[end] == '"' || lx.src[end] == '\'') && isPyPrefix(word) {
		lx.str(start, end, strings.ToLower(word))
		return
	}
	t := lx.emit(tkIdent, start, word)
	if nonASCII {
		t.flags |= tfNonASCII
		if n := norm.NFKC.String(word); n != word {
			t.text = n
			t.flags |= tfNFKCChanged
		}
	}
}

func isPyPrefix(w string) bool {
	if len(w) > 2 {
		return false
	}
	w = strings.ToLower(w)
	switch w {
	case "r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt":
		return true
	}
	return false
}

// pyOpLen returns the length of the operator at the start of s (0 if none).
func pyOpLen(s string) int {
	c := s[0]
	var c1, c2 byte
	if len(s) > 1 {
		c1 = s[1]
	}
	if len(s) > 2 {
		c2 = s[2]
	}
	switch c {
	case '*', '/', '<', '>':
		if c1 == c { // ** // << >>
			if c2 == '=' {
				return 3
			}
			return 2
		}
		if c1 == '=' || c == '-' && c1 == '>' {
			return 2
		}
		return 1
	case '.':
		if c1 == '.' && c2 == '.' {
			return 3
		}
		return 1
	case '-':
		if c1 == '=' || c1 == '>' {
			return 2
		}
		return 1
	case '!':
		if c1 == '=' {
			return 2
		}
		return 0
	case '+', '%', '&', '|', '^', '@', '=', ':':
		if c1 == '=' {
			return 2
		}
		return 1
	case '~', '(', ')', '[', ']', '{', '}', ',', ';':
		return 1
	}
	return 0
}

func (lx *pyLexer) op() {
	start := lx.i
	n := pyOpLen(lx.src[lx.i:])
	if n == 0 {
		lx.i++
		lx.emit(tkOther, start, lx.src[start:lx.i])
		lx.bad = true
		return
	}
	lx.i += n
	switch lx.src[start] {
	case '(', '[', '{':
		lx.depth++
	case ')', ']', '}':
		if lx.depth > 0 {
			lx.depth--
		}
	}
	lx.emit(tkOp, start, lx.src[start:lx.i])
}

// str lexes a string literal whose prefix spans [start, q) and whose
// opening quote is at q.
func (lx *pyLexer) str(start, q int, prefix string) {
	quote := lx.src[q]
	triple := hasTriple(lx.src, q)
	open := 1
	if triple {
		open = 3
	}
	interp := strings.ContainsAny(prefix, "ft")
	idx := len(lx.toks)
	lx.emit(tkString, start, "")
	line := lx.line
	bodyStart := q + open
	end, bodyEnd, ok := lx.scanBody(bodyStart, quote, triple, interp)
	t := &lx.toks[idx]
	t.text, t.val, t.line = lx.src[start:end], lx.src[bodyStart:bodyEnd], int32(line)
	if strings.Contains(prefix, "r") {
		t.flags |= tfRaw
	}
	if interp && strings.IndexByte(t.val, '{') >= 0 {
		t.flags |= tfInterp
	}
	if !ok {
		t.flags |= tfUnterminated
		lx.bad = true
	}
	lx.i = end
}

// scanBody finds the closing quote. It returns the index after the literal,
// the end of the body, and whether the literal was terminated.
func (lx *pyLexer) scanBody(j int, quote byte, triple, interp bool) (int, int, bool) {
	for j < len(lx.src) {
		c := lx.src[j]
		switch {
		case c == '\\':
			if j+1 < len(lx.src) && lx.src[j+1] == '\n' {
				lx.line++
			}
			j += 2
			continue
		case c == '\n':
			if !triple {
				return j, j, false
			}
			lx.line++
		case c == quote:
			if !triple {
				return j + 1, j, true
			}
			if hasTriple(lx.src, j) {
				return j + 3, j, true
			}
		case c == '{' && interp:
			if j+1 < len(lx.src) && lx.src[j+1] == '{' {
				j += 2
				continue
			}
			j = lx.replacement(j + 1)
			continue
		}
		j++
	}
	return len(lx.src), len(lx.src), false
}

// replacement handles an f-string replacement field starting after '{'. The
// expression part is lexed recursively and wrapped in synthetic parentheses;
// nested fields in the format spec are lexed too.
func (lx *pyLexer) replacement(j int) int {
	start, line := j, lx.line
	exprEnd, end, ok := lx.scanField(j)
	if !ok {
		lx.bad = true
		return end
	}
	lx.sublex(start, exprEnd, line)
	saved := lx.line // the spec's newlines were already counted above
	defer func() { lx.line = saved }()
	for k := exprEnd; k < end; k++ { // nested fields in the format spec
		if lx.src[k] == '{' {
			e, e2, ok := lx.scanField(k + 1)
			if !ok {
				lx.bad = true
				break
			}
			lx.sublex(k+1, e, line)
			k = e2
		}
	}
	return end + 1
}

// scanField finds the end of a replacement field: the index where the
// expression stops (at a top-level '!' or ':'), the index of the closing
// '}', and whether one was found. Nested strings and brackets are skipped.
func (lx *pyLexer) scanField(j int) (int, int, bool) {
	depth, exprEnd := 0, -1
	for j < len(lx.src) {
		c := lx.src[j]
		switch {
		case c == '\'' || c == '"':
			j = skipPyString(lx.src, j, &lx.line)
			continue
		case c == '\n':
			lx.line++
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']':
			depth--
		case c == '}':
			if depth == 0 {
				if exprEnd < 0 {
					exprEnd = j
				}
				return exprEnd, j, true
			}
			depth--
		case depth == 0 && exprEnd < 0 && (c == ':' || c == '!' && j+1 < len(lx.src) && lx.src[j+1] != '='):
			exprEnd = j
		}
		j++
	}
	return j, j, false
}

func (lx *pyLexer) sublex(lo, hi, line int) {
	if lx.idepth >= maxInterpDepth {
		lx.bad = true
		return
	}
	lx.toks = append(lx.toks, token{text: "(", pos: int32(lo), line: int32(line), kind: tkOp, flags: tfSynthetic})
	sub := &pyLexer{src: lx.src[:hi], i: lo, line: line, depth: 1, idepth: lx.idepth + 1, toks: lx.toks}
	sub.run()
	lx.toks = append(sub.toks, token{text: ")", pos: int32(hi), line: int32(line), kind: tkOp, flags: tfSynthetic})
	lx.bad = lx.bad || sub.bad
}

// skipPyString skips a (possibly triple-quoted) string starting at the quote
// at j and returns the index after it, counting newlines into line.
func skipPyString(s string, j int, line *int) int {
	q := s[j]
	n := 1
	if hasTriple(s, j) {
		n = 3
	}
	for k := j + n; k < len(s); k++ {
		switch s[k] {
		case '\\':
			if k+1 < len(s) && s[k+1] == '\n' {
				*line++
			}
			k++
		case '\n':
			if n == 1 {
				return k // the caller counts this newline
			}
			*line++
		case q:
			if n == 1 || hasTriple(s, k) {
				return k + n
			}
		}
	}
	return len(s)
}

// hasTriple reports whether s has the same quote three times at j.
func hasTriple(s string, j int) bool {
	return j+2 < len(s) && s[j+1] == s[j] && s[j+2] == s[j]
}
