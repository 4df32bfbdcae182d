package risk

import "strings"

// The JavaScript allowlist: computation, console output, Math, JSON and the
// methods of plain values. Globals map to nil (any property) or to the
// properties allowed.
var jsAllowedGlobals = map[string]map[string]bool{
	"console": setOf("log", "error", "warn", "info", "debug", "table"),
	"Math":    nil,
	"JSON":    setOf("parse", "stringify"),
	"Array":   setOf("isArray", "from", "of"),
	"Object":  setOf("keys", "values", "entries", "fromEntries", "freeze", "isFrozen", "assign"),
	"String":  setOf("fromCharCode", "raw"),
	"Number": setOf("isInteger", "isFinite", "isNaN", "isSafeInteger", "parseFloat", "parseInt",
		"MAX_SAFE_INTEGER", "MIN_SAFE_INTEGER", "EPSILON", "MAX_VALUE", "MIN_VALUE", "POSITIVE_INFINITY",
		"NEGATIVE_INFINITY"),
	"Date": setOf("now", "UTC", "parse"), "Boolean": {}, "Map": {}, "Set": {}, "parseInt": {}, "parseFloat": {},
	"isNaN": {}, "isFinite": {}, "Error": {}, "TypeError": {}, "RangeError": {}, "RegExp": {}, "BigInt": {},
	"encodeURIComponent": {}, "decodeURIComponent": {},
}

var jsKeywords = setOf("var", "let", "const", "function", "return", "if", "else", "for", "while", "do",
	"break", "continue", "of", "in", "new", "typeof", "instanceof", "switch", "case", "default", "try",
	"catch", "finally", "throw", "true", "false", "null", "undefined", "NaN", "Infinity", "void", "delete")

// jsBannedNames are never allowed, even when the code declares them (the
// proof uses one flat scope; see pyBannedNames).
var jsBannedNames = setOf("eval", "Function", "require", "module", "exports", "process", "global",
	"globalThis", "window", "self", "this", "arguments", "import", "export", "class", "super", "with",
	"async", "await", "yield", "Reflect", "Proxy", "Buffer", "Deno", "Bun", "fetch", "WebAssembly",
	"setTimeout", "setInterval", "setImmediate", "queueMicrotask", "__dirname", "__filename", "Symbol",
	"XMLHttpRequest", "WebSocket", "Worker", "SharedArrayBuffer", "Atomics", "frames", "parent", "top",
	"document", "location", "navigator", "importScripts", "structuredClone", "Promise", "Intl",
	"escape", "unescape", "atob", "btoa", "debugger", "AsyncFunction", "GeneratorFunction", "crypto",
	"performance", "WeakRef", "FinalizationRegistry", "Iterator")

var jsSafeMethods = setOf("push", "pop", "shift", "unshift", "slice", "splice", "concat", "join", "map",
	"filter", "reduce", "reduceRight", "forEach", "find", "findIndex", "findLast", "findLastIndex", "some",
	"every", "includes", "indexOf", "lastIndexOf", "sort", "reverse", "flat", "flatMap", "fill", "keys",
	"values", "entries", "length", "toFixed", "toPrecision", "toUpperCase", "toLowerCase", "trim",
	"trimStart", "trimEnd", "split", "replace", "replaceAll", "startsWith", "endsWith", "padStart",
	"padEnd", "repeat", "charAt", "charCodeAt", "codePointAt", "substring", "at", "match", "matchAll",
	"test", "search", "localeCompare", "normalize", "get", "set", "has", "add", "delete", "size", "clear",
	"getTime", "getFullYear", "getMonth", "getDate", "getDay", "getHours", "getMinutes", "getSeconds",
	"getMilliseconds", "toISOString", "toJSON", "toLocaleString", "toString", "message", "name")

// proveJS is the SAFE proof for JavaScript. Besides names, it must stop
// property lookups by computed strings: ({})[k][k]("return process")() with
// k = "constr"+"uctor" reaches Function with no banned name in sight. So a
// computed key must be a literal or arithmetic over numeric variables.
func proveJS(toks []token, text string) bool {
	for _, bad := range []string{"__", "constructor", "prototype"} {
		if strings.Contains(text, bad) {
			return false
		}
	}
	pr := &jsProof{toks: toks, decls: map[string]int{}, numInit: map[string]bool{}}
	pr.declarations()
	if !pr.destructuringOK() {
		return false
	}
	pr.numericVars()
	return pr.check()
}

type jsProof struct {
	toks    []token
	decls   map[string]int // declaration sites per name
	numInit map[string]bool
	numeric map[string]bool
}

func (pr *jsProof) isOp(i int, op string) bool {
	return i >= 0 && i < len(pr.toks) && pr.toks[i].is(op)
}

func (pr *jsProof) isWord(i int, w string) bool {
	return i >= 0 && i < len(pr.toks) && pr.toks[i].kind == tkIdent && pr.toks[i].text == w
}

func (pr *jsProof) declare(i int) {
	if i < len(pr.toks) && pr.toks[i].kind == tkIdent {
		pr.decls[pr.toks[i].text]++
	}
}

// declarations counts every binding: let/const/var (with destructuring),
// function names and parameters, arrow parameters and catch parameters.
func (pr *jsProof) declarations() {
	toks := pr.toks
	for i := 0; i < len(toks); i++ {
		t := &toks[i]
		switch {
		case t.kind == tkIdent && (t.text == "let" || t.text == "const" || t.text == "var"):
			pr.declList(i + 1)
		case t.kind == tkIdent && t.text == "function":
			k := i + 1
			if pr.isOp(k, "*") {
				k++
			}
			if !pr.isOp(k, "(") {
				pr.declare(k)
				k++
			}
			pr.bindGroup(k)
		case t.kind == tkIdent && t.text == "catch" && pr.isOp(i+1, "("):
			pr.bindGroup(i + 1)
		case t.is("=>") && i > 0:
			if toks[i-1].kind == tkIdent {
				pr.declare(i - 1)
			} else if toks[i-1].is(")") {
				pr.bindGroup(pr.matchBack(i - 1))
			}
		}
	}
}

// declList declares the bindings after let/const/var at i, following
// commas at bracket depth 0, and records numeric initialisers.
func (pr *jsProof) declList(i int) {
	toks := pr.toks
	for i < len(toks) {
		if toks[i].kind == tkIdent {
			pr.declare(i)
			if pr.isOp(i+1, "=") && i+2 < len(toks) && toks[i+2].kind == tkNumber &&
				(i+3 >= len(toks) || toks[i+3].is(";") || toks[i+3].is(",") || toks[i+3].line > toks[i+2].line) {
				pr.numInit[toks[i].text] = true
			}
		} else if toks[i].is("{") || toks[i].is("[") {
			pr.bindGroup(i)
		}
		next := pr.skipExpr(i + 1)
		if !pr.isOp(next, ",") {
			return
		}
		i = next + 1
	}
}

// skipExpr returns the index of the next ',' or ';' at depth 0, or of a
// token that starts a new statement.
func (pr *jsProof) skipExpr(i int) int {
	depth := 0
	for ; i < len(pr.toks); i++ {
		t := &pr.toks[i]
		switch {
		case t.is("(") || t.is("[") || t.is("{"):
			depth++
		case t.is(")") || t.is("]") || t.is("}"):
			if depth == 0 {
				return i
			}
			depth--
		case depth == 0 && (t.is(",") || t.is(";")):
			return i
		case depth == 0 && t.kind == tkIdent && (t.text == "let" || t.text == "const" || t.text == "var" || t.text == "of" || t.text == "in"):
			return i
		}
	}
	return i
}

// bindGroup declares the identifiers of a bracketed binding pattern or
// parameter list at open: names not followed by ':' (object keys) and not
// after '=' (default values).
func (pr *jsProof) bindGroup(open int) {
	if open < 0 || open >= len(pr.toks) {
		return
	}
	depth, inDefault := 0, false
	for k := open; k < len(pr.toks); k++ {
		t := &pr.toks[k]
		switch {
		case t.is("(") || t.is("[") || t.is("{"):
			depth++
		case t.is(")") || t.is("]") || t.is("}"):
			depth--
			if depth == 0 {
				return
			}
		case t.is("="):
			inDefault = true
		case t.is(","):
			inDefault = false
		case t.kind == tkIdent && !inDefault && !pr.isOp(k+1, ":") && !pr.isOp(k-1, "."):
			pr.declare(k)
		}
	}
}

func (pr *jsProof) matchBack(close int) int {
	depth := 0
	for k := close; k >= 0; k-- {
		switch {
		case pr.toks[k].is(")") || pr.toks[k].is("]") || pr.toks[k].is("}"):
			depth++
		case pr.toks[k].is("(") || pr.toks[k].is("[") || pr.toks[k].is("{"):
			depth--
			if depth == 0 {
				return k
			}
		}
	}
	return -1
}

// destructuringOK rejects destructuring assignments ([i] = ..., ({a} = ...)),
// which could assign strings to variables the proof treats as numeric.
func (pr *jsProof) destructuringOK() bool {
	for i := 1; i < len(pr.toks); i++ {
		if !pr.toks[i].is("=") || !(pr.toks[i-1].is("]") || pr.toks[i-1].is("}")) {
			continue
		}
		open := pr.matchBack(i - 1)
		if open <= 0 {
			return false
		}
		p := &pr.toks[open-1]
		decl := p.kind == tkIdent && (p.text == "let" || p.text == "const" || p.text == "var")
		member := pr.toks[open].is("[") && (p.kind == tkIdent && !jsKeywords[p.text] || p.is(")") || p.is("]"))
		if !decl && !member {
			return false
		}
	}
	return true
}
