package risk

import "strings"

var jsAssignOps = setOf("=", "+=", "-=", "*=", "/=", "%=", "**=", "<<=", ">>=", ">>>=", "&=", "|=", "^=", "&&=", "||=", "??=")

// numericVars keeps the variables declared once with a number and only ever
// assigned arithmetic over numbers and such variables.
func (pr *jsProof) numericVars() {
	pr.numeric = map[string]bool{}
	for n := range pr.numInit {
		if pr.decls[n] == 1 {
			pr.numeric[n] = true
		}
	}
	toks := pr.toks
	for i := range toks {
		t := &toks[i]
		if t.kind != tkIdent || !pr.numeric[t.text] || pr.isOp(i-1, ".") {
			continue
		}
		if i+1 < len(toks) && toks[i+1].kind == tkOp && jsAssignOps[toks[i+1].text] && !pr.isNumericDecl(i) {
			end := pr.skipExpr(i + 2)
			if !pr.arithmetic(i+2, end) {
				delete(pr.numeric, t.text)
			}
		}
		if pr.isWord(i+1, "of") || pr.isWord(i+1, "in") || pr.isOp(i-1, "...") {
			delete(pr.numeric, t.text)
		}
	}
}

func (pr *jsProof) isNumericDecl(i int) bool {
	p := i - 1
	return p >= 0 && pr.toks[p].kind == tkIdent && (pr.toks[p].text == "let" || pr.toks[p].text == "var" || pr.toks[p].text == "const")
}

// arithmetic reports that toks[lo:hi] are numbers, numeric variables,
// arithmetic operators and parentheses only.
func (pr *jsProof) arithmetic(lo, hi int) bool {
	if lo >= hi {
		return false
	}
	for k := lo; k < hi; k++ {
		t := &pr.toks[k]
		switch t.kind {
		case tkNumber:
		case tkIdent:
			if !pr.numeric[t.text] {
				return false
			}
		case tkOp:
			switch t.text {
			case "+", "-", "*", "/", "%", "**", "(", ")", "<<", ">>", ">>>", "&", "|", "^", "~":
			default:
				return false
			}
		default:
			return false
		}
	}
	return true
}

// check is the final pass over every token.
func (pr *jsProof) check() bool {
	toks := pr.toks
	root := ""
	for i := 0; i < len(toks); i++ {
		t := &toks[i]
		switch {
		case t.kind == tkOther:
			return false
		case t.is("[") && pr.isMember(i):
			end := pr.closeBracket(i)
			if !pr.keyOK(i+1, end) {
				return false
			}
		case t.kind != tkIdent:
		case pr.isOp(i-1, ".") || pr.isOp(i-1, "?."):
			if !pr.propOK(i, root) {
				return false
			}
		default:
			root = ""
			if !pr.nameOK(i) {
				return false
			}
			if _, ok := jsAllowedGlobals[t.text]; ok && pr.decls[t.text] == 0 {
				root = t.text
			}
		}
	}
	return true
}

func (pr *jsProof) nameOK(i int) bool {
	t := &pr.toks[i]
	name := t.text
	switch {
	case jsBannedNames[name] || strings.HasPrefix(name, "#"):
		return false
	case jsKeywords[name]:
		return true
	case pr.isOp(i+1, ":") && (pr.isOp(i-1, "{") || pr.isOp(i-1, ",")):
		return true // object literal key
	}
	_, global := jsAllowedGlobals[name]
	return global || pr.decls[name] > 0
}

func (pr *jsProof) propOK(i int, root string) bool {
	name := pr.toks[i].text
	if i >= 2 && pr.toks[i-2].kind == tkIdent && root != "" && pr.toks[i-2].text == root {
		attrs := jsAllowedGlobals[root]
		return attrs == nil || attrs[name]
	}
	return jsSafeMethods[name]
}

// isMember reports a '[' that indexes a value rather than opening an array.
func (pr *jsProof) isMember(i int) bool {
	if i == 0 {
		return false
	}
	p := &pr.toks[i-1]
	switch {
	case p.kind == tkIdent:
		return !jsKeywords[p.text] || p.text == "undefined"
	case p.kind == tkString && p.flags&tfInterp == 0:
		return true
	}
	return p.is(")") || p.is("]") || p.is("?.")
}

func (pr *jsProof) closeBracket(open int) int {
	depth := 0
	for k := open; k < len(pr.toks); k++ {
		switch {
		case pr.toks[k].is("[") || pr.toks[k].is("(") || pr.toks[k].is("{"):
			depth++
		case pr.toks[k].is("]") || pr.toks[k].is(")") || pr.toks[k].is("}"):
			depth--
			if depth == 0 {
				return k
			}
		}
	}
	return len(pr.toks)
}

// keyOK allows a computed key that is a string literal, or arithmetic over
// numbers and numeric variables.
func (pr *jsProof) keyOK(lo, hi int) bool {
	if hi-lo == 1 && pr.toks[lo].kind == tkString && pr.toks[lo].flags&(tfInterp|tfRegex) == 0 {
		return !isDangerousName(unescape(pr.toks[lo].val))
	}
	return pr.arithmetic(lo, hi)
}
