package risk

import (
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tkIdent tokKind = iota + 1
	tkString
	tkNumber
	tkOp
	tkNewline // end of a logical line (statement separator)
	tkOther   // a character the tokenizer does not understand
)

type tokFlag uint16

const (
	tfInterp       tokFlag = 1 << iota // f/t-string or template literal with substitutions
	tfRaw                              // raw string: no escape processing
	tfUnterminated                     // string or comment ran to the end of input
	tfNonASCII                         // identifier with non-ASCII characters
	tfNFKCChanged                      // identifier that NFKC normalisation changes
	tfEscape                           // JS identifier written with \u escapes
	tfSynthetic                        // parenthesis inserted around an interpolation
	tfRegex                            // JS regular expression literal
)

// token is one lexeme. text is the identifier (normalised for Python), the
// operator, or the full string literal; val is a string literal's content
// between its quotes, escapes not processed.
type token struct {
	text  string
	val   string
	pos   int32
	line  int32
	kind  tokKind
	flags tokFlag
}

func (t *token) is(op string) bool { return t.kind == tkOp && t.text == op }

// tokPool recycles token slices: tokenising a 4 KiB program makes about a
// thousand tokens, and allocating them per request is the largest cost.
var tokPool = sync.Pool{New: func() any { s := make([]token, 0, 512); return &s }}

func getTokens() *[]token { return tokPool.Get().(*[]token) }

// putTokens returns a slice to the pool without clearing it: clearing
// pointerful memory costs more than the rest of a small request's
// bookkeeping, and the only effect of not clearing is that one recent
// input stays reachable until the slice is reused.
func putTokens(p *[]token) {
	if cap(*p) > 1<<16 {
		return // do not keep huge slices alive after a large input
	}
	*p = (*p)[:0]
	tokPool.Put(p)
}

func isIdentStartASCII(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func isIdentASCII(c byte) bool { return isIdentStartASCII(c) || c >= '0' && c <= '9' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isIdentRune approximates Unicode XID_Continue for non-ASCII runes.
func isIdentRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.In(r, unicode.Mn, unicode.Mc, unicode.Pc, unicode.Nl)
}

// scanIdent returns the end of the identifier starting at i and whether it
// contains non-ASCII runes. extra lists ASCII bytes allowed besides [A-Za-z0-9_].
func scanIdent(s string, i int, extra string) (int, bool) {
	nonASCII := false
	for i < len(s) {
		c := s[i]
		if isIdentASCII(c) || (extra != "" && strings.IndexByte(extra, c) >= 0) {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			break
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || !isIdentRune(r) {
			break
		}
		nonASCII = true
		i += n
	}
	return i, nonASCII
}

// span is a half-open range of token indexes.
type span struct{ lo, hi int }

// callArgs splits the arguments of the call whose '(' is at toks[open]. It
// returns at most four argument spans (enough for every check here) and the
// index of the closing parenthesis (len(toks) if unbalanced).
func callArgs(toks []token, open int) (args [4]span, n int, close int) {
	depth, start := 0, open+1
	for i := open; i < len(toks); i++ {
		t := &toks[i]
		if t.kind != tkOp {
			continue
		}
		switch t.text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				if i > start && n < len(args) {
					args[n] = span{start, i}
					n++
				}
				return args, n, i
			}
		case ",":
			if depth == 1 {
				if n < len(args) {
					args[n] = span{start, i}
					n++
				}
				start = i + 1
			}
		}
	}
	return args, n, len(toks)
}

// literalArg reports whether the span is exactly one plain string literal,
// and returns its content.
func literalArg(toks []token, a span) (string, bool) {
	if a.hi-a.lo != 1 {
		return "", false
	}
	t := &toks[a.lo]
	if t.kind != tkString || t.flags&(tfInterp|tfUnterminated) != 0 {
		return "", false
	}
	return t.val, true
}

// unescape decodes the common backslash escapes of Python and JavaScript
// string literals (\xHH, \uXXXX, \u{...}, \NNN octal, \n...), which is what
// obfuscated names use. Unknown escapes keep the escaped character.
func unescape(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		r, n := decodeEscape(s[i:])
		b.WriteRune(r)
		i += n - 1
	}
	return b.String()
}

func decodeEscape(s string) (rune, int) {
	switch c := s[0]; c {
	case 'x':
		return hexRune(s, 1, 2)
	case 'u':
		if len(s) > 1 && s[1] == '{' {
			if j := strings.IndexByte(s, '}'); j > 2 && j < 10 {
				if v, err := strconv.ParseUint(s[2:j], 16, 32); err == nil {
					return rune(v), j + 1
				}
			}
		}
		return hexRune(s, 1, 4)
	case 'U':
		return hexRune(s, 1, 8)
	case 'n':
		return '\n', 1
	case 't':
		return '\t', 1
	case 'r':
		return '\r', 1
	}
	if s[0] >= '0' && s[0] <= '7' {
		n := 1
		for n < 3 && n < len(s) && s[n] >= '0' && s[n] <= '7' {
			n++
		}
		v, _ := strconv.ParseUint(s[:n], 8, 32)
		return rune(v), n
	}
	r, n := utf8.DecodeRuneInString(s)
	return r, n
}

func hexRune(s string, skip, width int) (rune, int) {
	if len(s) < skip+width {
		return rune(s[0]), 1
	}
	v, err := strconv.ParseUint(s[skip:skip+width], 16, 32)
	if err != nil {
		return rune(s[0]), 1
	}
	return rune(v), skip + width
}
