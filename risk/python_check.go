package risk

import "strings"

// check is the second proof pass: every identifier must be a keyword, an
// allowlisted builtin, an allowlisted module (or a name from one), or a name
// the code defines; every attribute must belong to an allowlisted module or
// be a safe method.
func (pr *pyProof) check() bool {
	toks := pr.toks
	root := "" // allowlisted module of the current name chain
	for i := 0; i < len(toks); i++ {
		t := &toks[i]
		switch t.kind {
		case tkOther:
			return false
		case tkIdent:
		default:
			continue
		}
		if strings.Contains(t.text, "__") && t.text != "__name__" {
			return false
		}
		if pr.isOp(i-1, ".") {
			if !pr.attrOK(i, root) {
				return false
			}
			continue
		}
		root = ""
		switch {
		case t.text == "import" || t.text == "from" && pr.isImportFrom(i):
			i = pr.skipStatement(i)
		case pyKeywords[t.text], pr.isKwarg(i):
		case pyBannedNames[t.text]:
			return false
		case pyAllowedBuiltins[t.text], pr.defs[t.text]:
		case pr.mods[t.text] != "":
			root = pr.mods[t.text]
		default:
			return false
		}
	}
	return true
}

func (pr *pyProof) attrOK(i int, root string) bool {
	name := pr.toks[i].text
	if strings.HasPrefix(name, "_") {
		return false
	}
	if i >= 2 && pr.toks[i-2].kind == tkIdent && root != "" {
		attrs := pyAllowedModules[root]
		return attrs == nil || attrs[name]
	}
	return pySafeMethods[name]
}

// isKwarg reports a keyword argument name: f(key=...).
func (pr *pyProof) isKwarg(i int) bool {
	return pr.isOp(i+1, "=") && (pr.isOp(i-1, "(") || pr.isOp(i-1, ","))
}

func (pr *pyProof) isImportFrom(i int) bool {
	for k := i + 1; k < len(pr.toks) && pr.toks[k].kind != tkNewline; k++ {
		if pr.toks[k].kind == tkIdent && pr.toks[k].text == "import" {
			return true
		}
	}
	return false
}

func (pr *pyProof) skipStatement(i int) int {
	for i < len(pr.toks) && pr.toks[i].kind != tkNewline && !pr.toks[i].is(";") {
		i++
	}
	return i
}
