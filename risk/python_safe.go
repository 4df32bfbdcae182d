package risk

import "strings"

// The Python allowlist. It is intentionally small: pure computation over
// data, no I/O beyond print, no reflection. Anything else is not proven and
// stays at least LOW; widening it is a security decision, not a convenience.
//
// Modules map to nil (any public attribute) or to the attributes allowed.
// string and typing are restricted because string.Formatter.get_field and
// typing.get_type_hints turn strings into attribute lookups and evaluation.
var pyAllowedModules = map[string]map[string]bool{
	"math": nil, "json": nil, "re": nil, "datetime": nil, "collections": nil, "itertools": nil,
	"functools": nil, "statistics": nil, "decimal": nil, "fractions": nil, "random": nil,
	"textwrap": nil, "heapq": nil, "bisect": nil, "enum": nil,
	"string": setOf("ascii_letters", "ascii_lowercase", "ascii_uppercase", "digits", "hexdigits",
		"octdigits", "punctuation", "printable", "whitespace", "capwords", "Template"),
	"typing": setOf("Any", "List", "Dict", "Set", "FrozenSet", "Tuple", "Optional", "Union", "Callable",
		"Iterable", "Iterator", "Sequence", "Mapping", "MutableMapping", "Literal", "Final", "NamedTuple",
		"Generator", "TypeVar", "Generic", "Counter", "DefaultDict", "Deque", "cast"),
	"dataclasses": setOf("dataclass", "field", "asdict", "astuple", "replace", "is_dataclass"),
}

var pyAllowedBuiltins = setOf(
	"print", "len", "range", "sum", "min", "max", "sorted", "enumerate", "zip", "map", "filter", "abs",
	"round", "int", "float", "str", "list", "dict", "set", "tuple", "bool", "isinstance", "any", "all",
	"reversed", "divmod", "pow", "chr", "ord", "hex", "oct", "bin", "repr", "format", "frozenset", "iter",
	"next", "slice", "complex", "hash", "bytes", "NotImplemented", "Ellipsis", "__name__",
	"Exception", "ValueError", "TypeError", "KeyError", "IndexError", "ZeroDivisionError", "ArithmeticError",
	"StopIteration", "RuntimeError", "AssertionError", "NotImplementedError", "OverflowError", "LookupError",
)

var pyKeywords = setOf(
	"False", "None", "True", "and", "as", "assert", "break", "continue", "def", "del", "elif", "else",
	"except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal", "not",
	"or", "pass", "raise", "return", "try", "while", "with", "yield",
)

// pyBannedNames can never appear as a bare name, even if the code assigns
// them: the proof uses one flat scope, so a parameter named "open" in one
// function must not make a call to the real open elsewhere look defined.
var pyBannedNames = setOf(
	"aiter", "anext", "ascii", "breakpoint", "callable", "classmethod", "compile", "copyright", "credits",
	"delattr", "dir", "eval", "exec", "execfile", "exit", "getattr", "globals", "hasattr", "help", "id",
	"input", "issubclass", "license", "locals", "memoryview", "object", "open", "property", "quit",
	"setattr", "staticmethod", "super", "type", "vars", "reload", "class", "async", "await",
	"bytearray",
)

// pySafeMethods may be called on any value: methods of the builtin types and
// of the allowlisted modules' objects that cannot reach the interpreter.
var pySafeMethods = setOf(
	"append", "extend", "insert", "pop", "remove", "clear", "copy", "count", "index", "reverse", "sort",
	"keys", "values", "items", "get", "setdefault", "update", "add", "discard", "union", "intersection",
	"difference", "symmetric_difference", "issubset", "issuperset", "isdisjoint", "join", "split", "rsplit",
	"splitlines", "strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize", "casefold",
	"swapcase", "replace", "startswith", "endswith", "find", "rfind", "rindex", "format", "zfill", "center",
	"ljust", "rjust", "partition", "rpartition", "expandtabs", "translate", "maketrans", "encode", "decode",
	"isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "isnumeric", "isdecimal", "istitle",
	"isascii", "removeprefix", "removesuffix", "most_common", "elements", "subtract", "total", "appendleft",
	"popleft", "extendleft", "rotate", "group", "groups", "groupdict", "start", "end", "span", "match",
	"search", "fullmatch", "findall", "finditer", "sub", "subn", "year", "month", "day", "hour", "minute",
	"second", "microsecond", "weekday", "isoweekday", "isoformat", "strftime", "date", "time", "timestamp",
	"total_seconds", "days", "seconds", "microseconds", "real", "imag", "conjugate", "numerator",
	"denominator", "is_integer", "bit_length", "bit_count", "as_integer_ratio", "to_bytes", "from_bytes",
	"hex", "fromkeys", "quantize", "sqrt", "name", "value", "limit_denominator", "today", "now",
	"fromisoformat", "combine", "substitute", "safe_substitute",
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// provePython is the SAFE proof. The caller has already checked that the
// lexer understood everything and that no pattern fired.
func provePython(toks []token, text string) bool {
	if !pyDunderFree(text) {
		return false
	}
	pr := &pyProof{toks: toks, defs: map[string]bool{}, mods: map[string]string{}}
	return pr.definitions() && pr.check()
}

// pyDunderFree reports that "__" appears only in __name__ and "__main__".
// Dunders in strings matter too: "{0.__class__}".format(x) walks attributes.
func pyDunderFree(text string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], "__")
		if j < 0 {
			return true
		}
		i += j
		if !strings.HasPrefix(text[i:], "__name__") && !strings.HasPrefix(text[i:], "__main__") {
			return false
		}
		i += 8
	}
}

type pyProof struct {
	toks []token
	defs map[string]bool   // names the code defines
	mods map[string]string // local name -> allowlisted module it comes from
}

func (pr *pyProof) isOp(i int, op string) bool {
	return i >= 0 && i < len(pr.toks) && pr.toks[i].is(op)
}

// definitions collects the names the code defines and validates imports.
func (pr *pyProof) definitions() bool {
	toks := pr.toks
	st, depth := 0, 0
	for i := 0; i < len(toks); i++ {
		t := &toks[i]
		switch {
		case t.kind == tkNewline || t.is(";") || (t.is(":") && depth == 0):
			st = i + 1
		case t.is("(") || t.is("[") || t.is("{"):
			depth++
		case t.is(")") || t.is("]") || t.is("}"):
			depth--
		case t.is("=") && depth == 0:
			pr.defineTargets(st, i)
			st = i + 1
		case t.is(":="):
			if i > 0 && toks[i-1].kind == tkIdent {
				pr.defs[toks[i-1].text] = true
			}
		case t.kind != tkIdent || pr.isOp(i-1, "."):
		case t.text == "import" || t.text == "from":
			if !pr.importStmt(i) {
				return false
			}
			if t.text == "import" || pr.isImportFrom(i) {
				i = pr.skipStatement(i) - 1
			}
		case t.text == "def" && i+1 < len(toks):
			pr.defs[toks[i+1].text] = true
			pr.params(i+2, "(")
		case t.text == "lambda":
			pr.params(i+1, "lambda")
		case t.text == "for":
			pr.forTargets(i + 1)
		case t.text == "as" && i+1 < len(toks) && toks[i+1].kind == tkIdent:
			pr.defs[toks[i+1].text] = true
		}
	}
	return true
}

// defineTargets defines the names in a plain assignment target such as
// "a, (b, c) =". Subscripts and attributes define nothing.
func (pr *pyProof) defineTargets(lo, hi int) {
	for k := lo; k < hi; k++ {
		t := &pr.toks[k]
		if t.kind != tkIdent && !t.is(",") && !t.is("(") && !t.is(")") && !t.is("[") && !t.is("]") && !t.is("*") {
			return
		}
		if t.is("[") && k > lo && pr.toks[k-1].kind == tkIdent {
			return
		}
	}
	for k := lo; k < hi; k++ {
		if pr.toks[k].kind == tkIdent {
			pr.defs[pr.toks[k].text] = true
		}
	}
}

// params defines parameter names: inside def parentheses starting at i, or
// after "lambda" up to its colon.
func (pr *pyProof) params(i int, kind string) {
	toks := pr.toks
	depth := 0
	for k := i; k < len(toks); k++ {
		t := &toks[k]
		switch {
		case t.is("(") || t.is("[") || t.is("{"):
			depth++
		case t.is(")") || t.is("]") || t.is("}"):
			depth--
			if depth <= 0 && kind == "(" {
				return
			}
		case t.is(":") && depth == 0 && kind == "lambda":
			return
		case t.kind == tkIdent && k > 0:
			prev := &toks[k-1]
			top := depth == 1 && kind == "(" || depth == 0 && kind == "lambda"
			if top && (prev.is("(") || prev.is(",") || prev.is("*") || prev.is("**") || prev.text == "lambda") {
				pr.defs[t.text] = true
			}
		case t.kind == tkNewline:
			return
		}
	}
}

func (pr *pyProof) forTargets(i int) {
	for k := i; k < len(pr.toks); k++ {
		t := &pr.toks[k]
		if t.kind == tkIdent && t.text == "in" || t.kind == tkNewline {
			return
		}
		if t.kind == tkIdent && !pr.isOp(k-1, ".") {
			pr.defs[t.text] = true
		}
	}
}

// importStmt validates an import at i and defines what it binds.
func (pr *pyProof) importStmt(i int) bool {
	toks := pr.toks
	from := toks[i].text == "from"
	k := i + 1
	mod := ""
	if from {
		if k >= len(toks) || toks[k].kind != tkIdent {
			return false // relative import
		}
		mod = toks[k].text
		for k++; k+1 < len(toks) && toks[k].is(".") && toks[k+1].kind == tkIdent; k += 2 {
		}
		if k >= len(toks) || toks[k].text != "import" {
			return true // "raise X from Y"
		}
		k++
	}
	return pr.importNames(k, mod)
}

func (pr *pyProof) importNames(k int, from string) bool {
	toks := pr.toks
	if _, ok := pyAllowedModules[from]; from != "" && !ok {
		return false
	}
	for ; k < len(toks) && toks[k].kind != tkNewline && !toks[k].is(";"); k++ {
		t := &toks[k]
		if t.is("*") || t.kind == tkIdent && strings.HasPrefix(t.text, "_") {
			return false
		}
		if t.kind != tkIdent || t.text == "as" || pr.isOp(k-1, ".") || k > 0 && toks[k-1].text == "as" {
			continue
		}
		local := t.text
		if k+2 < len(toks) && toks[k+1].text == "as" {
			local = toks[k+2].text
		}
		if !pr.bindImport(from, t.text, local) {
			return false
		}
	}
	return true
}

func (pr *pyProof) bindImport(from, name, local string) bool {
	if from == "" { // import name[.sub] [as local]
		if _, ok := pyAllowedModules[name]; !ok {
			return false
		}
		pr.mods[local] = name
		return true
	}
	attrs := pyAllowedModules[from]
	if attrs == nil {
		pr.mods[local] = from
		return true
	}
	if !attrs[name] {
		return false
	}
	pr.defs[local] = true
	return true
}
