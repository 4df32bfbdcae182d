package risk

import "strings"

// dollar handles every $ form at lx.i.
func (lx *bashLexer) dollar(w *wordState) {
	start := lx.i
	next := byte(0)
	if lx.i+1 < len(lx.src) {
		next = lx.src[lx.i+1]
	}
	switch {
	case next == '(' && lx.i+2 < len(lx.src) && lx.src[lx.i+2] == '(':
		w.flags |= bwArith
		lx.paren(w, lx.i+2, true)
	case next == '(':
		w.flags |= bwCmdSub
		lx.paren(w, lx.i+2, false)
	case next == '{':
		lx.brace(w)
	case next == '\'':
		w.startCopy(lx, start)
		w.flags |= bwANSIC | bwQuoted
		lx.ansiC(w)
		return
	case next == '"':
		w.startCopy(lx, start)
		w.flags |= bwQuoted
		lx.i++
		lx.doubleQuoted(w)
		return
	case isIdentStartASCII(next):
		w.flags |= bwParam
		j := lx.i + 1
		for j < len(lx.src) && isIdentASCII(lx.src[j]) {
			j++
		}
		lx.i = j
	case isDigit(next) || next != 0 && strings.IndexByte("@*#?$!-", next) >= 0:
		w.flags |= bwParam
		lx.i += 2
	default:
		lx.i++
	}
	if w.copy {
		w.b.WriteString(lx.src[start:lx.i])
	}
}

// paren skips to the parenthesis closing the one before from, recording the
// body as a substitution. For $((..)) from is after the second '('.
func (lx *bashLexer) paren(w *wordState, from int, arith bool) {
	lx.i = lx.region(from, arith)
	if lx.i < 0 {
		w.flags |= bwUnterminated
		lx.i = len(lx.src)
	}
}

// region records the substitution whose body starts at from (just past its
// '(') and returns the index after it, or -1 if it is not closed. For
// arithmetic, from is at the second '(' and the body ends before "))";
// command substitutions nested in arithmetic are recorded too.
func (lx *bashLexer) region(from int, arith bool) int {
	line := lx.line
	end, ok := skipParens(lx.src, from, &lx.line)
	lo, hi := from, end-1
	if arith {
		lo, hi = from+1, end-2
	}
	hi = max(min(hi, len(lx.src)), lo)
	lo = min(lo, hi)
	if arith {
		lx.nested(lo, hi, line)
	}
	lx.subs = append(lx.subs, bashSub{lo: lo, hi: hi, line: line, arith: arith})
	if !ok {
		return -1
	}
	return end
}

// arithCommand lexes "((...))" at lx.i as one word.
func (lx *bashLexer) arithCommand() {
	start, line := lx.i, lx.line
	end := lx.region(lx.i+1, true)
	f := bwArith
	if end < 0 {
		f |= bwUnterminated
		lx.bad = true
		end = len(lx.src)
	}
	lx.i = end
	lx.emit(tkIdent, start, lx.src[start:end], lx.src[start:end], f, line)
}

// skipParens returns the index after the ')' matching an already-open '('
// (from is just past it), skipping quotes, nested substitutions and
// comments. ok is false when the input ends first.
func skipParens(s string, from int, line *int) (int, bool) {
	depth := 1
	for j := from; j < len(s); j++ {
		switch c := s[j]; c {
		case '\\':
			j++
		case '\n':
			*line++
		case '\'':
			k := strings.IndexByte(s[j+1:], '\'')
			if k < 0 {
				return len(s), false
			}
			*line += strings.Count(s[j:j+1+k], "\n")
			j += k + 1
		case '"', '`':
			k := skipQuote(s, j, c, line)
			if k < 0 {
				return len(s), false
			}
			j = k
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return j + 1, true
			}
		case '#':
			if j > from && strings.IndexByte(" \t\n;(", s[j-1]) >= 0 {
				for j < len(s) && s[j] != '\n' {
					j++
				}
				j--
			}
		}
	}
	return len(s), false
}

// skipQuote returns the index of the quote closing the one at j, or -1.
func skipQuote(s string, j int, q byte, line *int) int {
	for k := j + 1; k < len(s); k++ {
		switch s[k] {
		case '\\':
			k++
		case '\n':
			*line++
		case q:
			return k
		case '$':
			if q == '"' && k+1 < len(s) && s[k+1] == '(' {
				end, ok := skipParens(s, k+2, line)
				if !ok {
					return -1
				}
				k = end - 1
			}
		}
	}
	return -1
}

// brace handles ${...}: simple names are bwParam; anything else (defaults
// with commands, indirection ${!x}, transforms ${x@P}) is bwParamComplex.
func (lx *bashLexer) brace(w *wordState) {
	depth := 0
	for j := lx.i + 1; j < len(lx.src); j++ {
		switch lx.src[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				body := lx.src[lx.i+2 : j]
				if isBashName(body) || len(body) == 1 && strings.IndexByte("@*#?$!-0123456789", body[0]) >= 0 {
					w.flags |= bwParam
				} else {
					w.flags |= bwParamComplex
					lx.nested(lx.i+2, j, lx.line)
				}
				lx.line += strings.Count(body, "\n")
				lx.i = j + 1
				return
			}
		case '\\':
			j++
		}
	}
	w.flags |= bwUnterminated
	lx.i = len(lx.src)
}

// nested records command substitutions inside a region that is not a word
// of its own (a ${..} body or a heredoc body).
func (lx *bashLexer) nested(lo, hi, line int) {
	for j := lo; j < hi; j++ {
		switch lx.src[j] {
		case '\n':
			line++
		case '\\':
			j++
		case '`':
			if k := strings.IndexByte(lx.src[j+1:hi], '`'); k >= 0 {
				lx.subs = append(lx.subs, bashSub{lo: j + 1, hi: j + 1 + k, line: line})
				j += k + 1
			}
		case '$':
			if j+1 < hi && lx.src[j+1] == '(' {
				l2 := line
				end, _ := skipParens(lx.src[:hi], j+2, &l2)
				arith := j+2 < hi && lx.src[j+2] == '('
				body := end - 1
				if arith {
					body = end - 2
				}
				if body < j+2 {
					body = j + 2
				}
				lx.subs = append(lx.subs, bashSub{lo: j + 2, hi: body, line: line, arith: arith})
				line = l2
				j = end - 1
			}
		}
	}
}

func isBashName(s string) bool {
	if s == "" || !isIdentStartASCII(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isIdentASCII(s[i]) {
			return false
		}
	}
	return true
}

func (lx *bashLexer) backtick(w *wordState) {
	w.flags |= bwCmdSub
	line := lx.line
	k := skipQuote(lx.src, lx.i, '`', &lx.line)
	if k < 0 {
		w.flags |= bwUnterminated
		lx.subs = append(lx.subs, bashSub{lo: lx.i + 1, hi: len(lx.src), line: line})
		lx.i = len(lx.src)
		return
	}
	lx.subs = append(lx.subs, bashSub{lo: lx.i + 1, hi: k, line: line})
	if w.copy {
		w.b.WriteString(lx.src[lx.i : k+1])
	}
	lx.i = k + 1
}

// ansiC decodes $'...' so that $'\x72\x6d' is seen as rm.
func (lx *bashLexer) ansiC(w *wordState) {
	j := lx.i + 2
	for j < len(lx.src) {
		c := lx.src[j]
		if c == '\'' {
			lx.i = j + 1
			return
		}
		if c == '\n' {
			lx.line++
		}
		if c != '\\' || j+1 >= len(lx.src) {
			w.b.WriteByte(c)
			j++
			continue
		}
		e := lx.src[j+1]
		if e == 'x' || e == 'u' || e == 'U' || e >= '0' && e <= '7' {
			w.flags |= bwANSIEscape
		}
		switch e {
		case '\'', '"', '\\', '?':
			w.b.WriteByte(e)
			j += 2
			continue
		case 'e', 'E':
			w.b.WriteByte(0x1b)
			j += 2
			continue
		}
		r, n := decodeEscape(lx.src[j+1:])
		w.b.WriteRune(r)
		j += 1 + n
	}
	w.flags |= bwUnterminated
	lx.i = len(lx.src)
}

// heredocs reads the bodies of pending heredocs after a newline.
func (lx *bashLexer) heredocs() {
	for _, h := range lx.pending {
		start, line := lx.i, lx.line
		found := false
		for lx.i < len(lx.src) {
			end := strings.IndexByte(lx.src[lx.i:], '\n')
			if end < 0 {
				end = len(lx.src) - lx.i
			}
			l := lx.src[lx.i : lx.i+end]
			if h.strip {
				l = strings.TrimLeft(l, "\t")
			}
			lx.i += end
			if lx.i < len(lx.src) {
				lx.i++
			}
			lx.line++
			if l == h.delim {
				found = true
				break
			}
		}
		var f tokFlag
		if !h.quoted {
			f = bwExpand
			lx.nested(start, lx.i, line)
			if hasComplexParam(lx.src[start:lx.i]) {
				f |= bwParamComplex
			}
		}
		if !found {
			f |= bwUnterminated
			lx.bad = true
		}
		lx.emit(tkString, start, lx.src[start:lx.i], lx.src[start:lx.i], f, line)
	}
	lx.pending = lx.pending[:0]
}

// hasComplexParam reports a ${...} that is not a plain ${NAME}; in an
// expanding heredoc body, ${x@P} would run command substitutions.
func hasComplexParam(body string) bool {
	for i := 0; ; {
		j := strings.Index(body[i:], "${")
		if j < 0 {
			return false
		}
		i += j + 2
		k := strings.IndexByte(body[i:], '}')
		if k < 0 || !isBashName(body[i:i+k]) {
			return true
		}
	}
}
