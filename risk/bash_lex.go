package risk

import (
	"strings"
	"unicode/utf8"
)

// Word flags for bash tokens (tkIdent words and tkString heredoc bodies).
// They reuse the tokFlag type; bash tokens never carry the Python/JS flags.
const (
	bwQuoted       tokFlag = 1 << iota // has '', "" or $"" quoting
	bwBackslash                        // has an unquoted backslash escape
	bwParam                            // $NAME, ${NAME} or a special parameter
	bwParamComplex                     // ${...} with operators, indirection, transforms
	bwCmdSub                           // $(...) or `...`
	bwArith                            // $((...))
	bwANSIC                            // $'...'
	bwANSIEscape                       // $'...' with \x, octal or \u escapes
	bwGlob                             // unquoted * ? [ or extglob
	bwBrace                            // unquoted {a,b} or {1..3}
	bwProcSub                          // <(...) or >(...)
	bwUnterminated                     // quote or substitution not closed
	bwExpand                           // heredoc body with expansions (unquoted delimiter)
	bwNonASCII                         // non-ASCII bytes outside quotes
)

// bashSub is the body of a command substitution or arithmetic expansion,
// analysed recursively after lexing.
type bashSub struct {
	lo, hi, line int
	arith        bool
}

type heredoc struct {
	delim  string
	strip  bool
	quoted bool
}

// bashLexer splits bash into words and operators. It understands comments,
// ”, "", $'..' (decoded), $"..", backslashes, $(..), `..`, $((..)), ${..},
// <(..), heredocs (<<, <<-, quoted delimiters) and here-strings. Word values
// (val) are quote-removed so c”url reads as curl.
type bashLexer struct {
	src       string
	i, line   int
	toks      []token
	subs      []bashSub
	pending   []heredoc
	wantDelim int // 1: "<<" seen, 2: "<<-" seen
	bad       bool
}

func lexBash(src string, lo, line int, buf []token) *bashLexer {
	lx := &bashLexer{src: src, i: lo, line: line, toks: buf}
	lx.run()
	return lx
}

func (lx *bashLexer) emit(kind tokKind, start int, text, val string, f tokFlag, line int) {
	lx.toks = append(lx.toks, token{text: text, val: val, pos: int32(start), line: int32(line), kind: kind, flags: f})
}

func (lx *bashLexer) run() {
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		switch {
		case c == '\n':
			lx.emit(tkNewline, lx.i, "\n", "", 0, lx.line)
			lx.line++
			lx.i++
			lx.heredocs()
		case c == ' ' || c == '\t':
			lx.i++
		case c == '#':
			for lx.i < len(lx.src) && lx.src[lx.i] != '\n' {
				lx.i++
			}
		case c == '\\' && lx.i+1 < len(lx.src) && lx.src[lx.i+1] == '\n':
			lx.i += 2
			lx.line++
		case (c == '<' || c == '>') && lx.i+1 < len(lx.src) && lx.src[lx.i+1] == '(':
			lx.word()
		case c == '(' && lx.i+1 < len(lx.src) && lx.src[lx.i+1] == '(':
			lx.arithCommand()
		case strings.IndexByte("|&;()<>", c) >= 0:
			lx.op(lx.i)
		case isDigit(c) && lx.ioNumber():
		default:
			lx.word()
		}
	}
	if len(lx.pending) > 0 {
		lx.bad = true // heredoc without a body
	}
}

var bashOps = []string{";;&", "<<<", "<<-", "&>>", "&&", "||", ";;", ";&", "|&", "<<", ">>", "<&", ">&", "<>", ">|", "&>"}

func (lx *bashLexer) op(start int) {
	rest := lx.src[lx.i:]
	o := rest[:1]
	for _, cand := range bashOps {
		if strings.HasPrefix(rest, cand) {
			o = cand
			break
		}
	}
	lx.i += len(o)
	switch o {
	case "<<":
		lx.wantDelim = 1
	case "<<-":
		lx.wantDelim = 2
	}
	lx.emit(tkOp, start, lx.src[start:lx.i], o, 0, lx.line)
}

// ioNumber lexes "2>" style redirects as one operator token.
func (lx *bashLexer) ioNumber() bool {
	j := lx.i
	for j < len(lx.src) && isDigit(lx.src[j]) {
		j++
	}
	if j >= len(lx.src) || (lx.src[j] != '<' && lx.src[j] != '>') || j+1 < len(lx.src) && lx.src[j+1] == '(' {
		return false
	}
	start := lx.i
	lx.i = j
	lx.op(start)
	return true
}

// wordState accumulates one word's value; val stays a slice of the source
// until a quote or escape forces a copy.
type wordState struct {
	start int
	b     strings.Builder
	copy  bool
	flags tokFlag
}

func (w *wordState) lit(lx *bashLexer, from, to int) {
	if w.copy {
		w.b.WriteString(lx.src[from:to])
	}
}

func (w *wordState) startCopy(lx *bashLexer, upto int) {
	if !w.copy {
		w.copy = true
		w.b.WriteString(lx.src[w.start:upto])
	}
}

func (lx *bashLexer) word() {
	w := &wordState{start: lx.i}
	line := lx.line
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		if lx.wordEnds(c) {
			break
		}
		lx.wordChar(w, c)
	}
	lx.i = min(lx.i, len(lx.src)) // a trailing backslash or quote may step past the end
	text := lx.src[w.start:lx.i]
	if text == "[" || text == "[[" || text == "]" || text == "]]" {
		w.flags &^= bwGlob // the test command and its closing bracket
	}
	val := text
	if w.copy {
		val = w.b.String()
	}
	if w.flags&bwUnterminated != 0 {
		lx.bad = true
	}
	lx.emit(tkIdent, w.start, text, val, w.flags, line)
	if lx.wantDelim != 0 {
		lx.pending = append(lx.pending, heredoc{delim: val, strip: lx.wantDelim == 2, quoted: w.flags&(bwQuoted|bwBackslash) != 0})
		lx.wantDelim = 0
	}
}

func (lx *bashLexer) wordEnds(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '|', '&', ';', ')':
		return true
	case '(':
		return true
	case '<', '>':
		return !(lx.i+1 < len(lx.src) && lx.src[lx.i+1] == '(')
	}
	return false
}

func (lx *bashLexer) wordChar(w *wordState, c byte) {
	start := lx.i
	switch c {
	case '\\':
		w.startCopy(lx, start)
		w.flags |= bwBackslash
		if lx.i+1 < len(lx.src) {
			if lx.src[lx.i+1] == '\n' {
				lx.line++
			} else {
				w.b.WriteByte(lx.src[lx.i+1])
			}
		}
		lx.i += 2
	case '\'':
		w.startCopy(lx, start)
		w.flags |= bwQuoted
		lx.singleQuoted(w)
	case '"':
		w.startCopy(lx, start)
		w.flags |= bwQuoted
		lx.doubleQuoted(w)
	case '$':
		lx.dollar(w)
	case '`':
		lx.backtick(w)
	case '<', '>':
		w.flags |= bwProcSub
		lx.paren(w, lx.i+2, false)
	case '*', '?', '[':
		w.flags |= bwGlob
		lx.i++
		w.lit(lx, start, lx.i)
		if lx.i < len(lx.src) && lx.src[lx.i] == '(' && c != '[' {
			lx.paren(w, lx.i+1, false) // extglob ?(...) *(...)
		}
	case '{':
		if end := strings.IndexByte(lx.src[lx.i:], '}'); end > 0 {
			if body := lx.src[lx.i : lx.i+end]; strings.Contains(body, ",") || strings.Contains(body, "..") {
				w.flags |= bwBrace
			}
		}
		lx.i++
		w.lit(lx, start, lx.i)
	default:
		if c >= utf8.RuneSelf {
			w.flags |= bwNonASCII
		}
		lx.i++
		w.lit(lx, start, lx.i)
	}
}

func (lx *bashLexer) singleQuoted(w *wordState) {
	j := strings.IndexByte(lx.src[lx.i+1:], '\'')
	if j < 0 {
		w.flags |= bwUnterminated
		w.b.WriteString(lx.src[lx.i+1:])
		lx.line += strings.Count(lx.src[lx.i:], "\n")
		lx.i = len(lx.src)
		return
	}
	body := lx.src[lx.i+1 : lx.i+1+j]
	w.b.WriteString(body)
	lx.line += strings.Count(body, "\n")
	lx.i += j + 2
}

// doubleQuoted scans "..." where $, ` and \ keep their meaning.
func (lx *bashLexer) doubleQuoted(w *wordState) {
	lx.i++
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		switch c {
		case '"':
			lx.i++
			return
		case '\\':
			if lx.i+1 < len(lx.src) {
				n := lx.src[lx.i+1]
				if strings.IndexByte("$`\"\\\n", n) < 0 {
					w.b.WriteByte('\\')
				}
				if n == '\n' {
					lx.line++
				} else {
					w.b.WriteByte(n)
				}
			}
			lx.i += 2
		case '$':
			lx.dollar(w)
		case '`':
			lx.backtick(w)
		default:
			if c == '\n' {
				lx.line++
			}
			w.b.WriteByte(c)
			lx.i++
		}
	}
	w.flags |= bwUnterminated
}
