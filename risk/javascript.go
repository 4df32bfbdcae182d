package risk

import (
	"regexp"
	"strconv"
	"strings"
)

var jsLang = language{raw: newRawSet(append(jsRaw, langRaw("js")...)), analyze: analyzeJS}

type jsAnalyzer struct {
	a          *analysis
	toks       []token
	hasDecoder bool
	execLine   int
}

func analyzeJS(a *analysis) {
	bufp := getTokens()
	toks, bad := lexJS(a.src.orig, (*bufp)[:0])
	defer func() { *bufp = toks; putTokens(bufp) }()

	a.calls = make([]string, 0, 64)
	j := &jsAnalyzer{a: a, toks: toks}
	j.identifiers()
	j.names()
	j.concat()
	j.jsfuck()
	if j.hasDecoder && j.execLine > 0 {
		a.c.add("js.obfuscation.base64_exec", j.execLine)
	}
	a.rawPatterns()
	if !bad && a.c.empty() {
		a.proven = proveJS(toks, a.src.norm)
	}
}

func (j *jsAnalyzer) hit(id string, t *token) { j.a.c.add(id, int(t.line)) }

func (j *jsAnalyzer) identifiers() {
	for i := range j.toks {
		t := &j.toks[i]
		if t.kind != tkIdent {
			continue
		}
		switch {
		case t.flags&tfEscape != 0:
			j.hit("js.obfuscation.unicode_escape_ident", t)
		case t.flags&tfNFKCChanged != 0:
			j.hit("obfuscation.nfkc_identifier", t)
		case t.flags&tfNonASCII != 0:
			j.hit("obfuscation.non_ascii_identifier", t)
		}
	}
}

var jsModules = map[string]string{
	"child_process": "js.process.child_process", "net": "js.net.socket", "dgram": "js.net.socket",
	"tls": "js.net.socket", "http": "js.net.http_client", "https": "js.net.http_client",
	"http2": "js.net.http_client", "axios": "js.net.http_client", "node-fetch": "js.net.http_client",
	"undici": "js.net.http_client", "got": "js.net.http_client", "request": "js.net.http_client",
	"superagent": "js.net.http_client", "ws": "js.net.http_client", "vm": "js.vm.vm_module",
	"repl": "js.vm.vm_module", "worker_threads": "js.process.worker", "cluster": "js.process.worker",
	"inspector": "js.debug.inspector", "module": "js.import.module_loader", "ffi-napi": "js.ffi.native_binding",
	"ffi": "js.ffi.native_binding", "ref-napi": "js.ffi.native_binding", "node-ffi": "js.ffi.native_binding",
	"v8": "js.ffi.native_binding",
}

func (j *jsAnalyzer) module(name string, t *token) {
	name = strings.TrimPrefix(name, "node:")
	j.a.imports = append(j.a.imports, name)
	if id := jsModules[name]; id != "" {
		j.hit(id, t)
	}
	if strings.HasSuffix(name, ".node") {
		j.hit("js.ffi.native_binding", t)
	}
}

func (j *jsAnalyzer) isOp(i int, op string) bool {
	return i >= 0 && i < len(j.toks) && j.toks[i].is(op)
}

// names walks name chains (a.b?.c) and checks calls, imports and globals.
func (j *jsAnalyzer) names() {
	toks := j.toks
	for i := 0; i < len(toks); i++ {
		if toks[i].kind != tkIdent {
			continue
		}
		k := i
		for k+2 < len(toks) && (toks[k+1].is(".") || toks[k+1].is("?.")) && toks[k+2].kind == tkIdent {
			k += 2
		}
		name := chainName(toks, i, k)
		if j.isOp(i-1, ".") || j.isOp(i-1, "?.") {
			name = "." + name
		}
		call := j.isOp(k+1, "(")
		if call {
			j.a.calls = append(j.a.calls, name)
		}
		j.check(name, i, k, call)
		i = k
	}
}

func chainName(toks []token, i, k int) string {
	if i == k {
		return toks[i].text
	}
	var b strings.Builder
	for n := i; n <= k; n += 2 {
		if n > i {
			b.WriteByte('.')
		}
		b.WriteString(toks[n].text)
	}
	return b.String()
}

var jsGlobalObjects = setOf("globalThis", "global", "window", "self", "frames", "top", "parent")

var jsDecoders = setOf("atob", "fromCharCode", "unescape", "decodeURIComponent", "fromCodePoint")

func (j *jsAnalyzer) check(name string, i, k int, call bool) {
	t := &j.toks[i]
	last := j.toks[k].text
	if jsDecoders[last] || last == "from" && strings.HasPrefix(name, "Buffer") && j.bufferDecode(k+1) {
		j.hasDecoder = true
	}
	switch {
	case name == "require" && call:
		j.require(k + 1)
	case name == "import" && call:
		j.hit("js.import.dynamic", t)
		j.literalModule(k + 1)
	case name == "import" || name == "export":
		j.importFrom(i)
	case name == "eval" && !j.isOp(i-1, "."):
		j.evalLike(k+1, call, t, "js.eval.eval_literal", "js.eval.eval")
	case name == "Function" && (call || j.isOp(i-1, "new") || j.prevIdent(i, "new")):
		j.evalLike(k+1, false, t, "", "js.eval.function_ctor")
	case strings.HasSuffix(name, ".constructor") && call:
		j.evalLike(k+1, false, t, "", "js.eval.function_ctor")
	case (name == "setTimeout" || name == "setInterval" || name == "setImmediate") && call:
		j.timer(k + 1)
	case jsGlobalObjects[strings.Split(name, ".")[0]] && !j.isOp(i-1, "."):
		j.globalAccess(t, k)
	case name == "fetch" && call || name == "XMLHttpRequest" || name == "WebSocket" || name == "EventSource":
		j.hit("js.net.http_client", t)
	}
}

func (j *jsAnalyzer) prevIdent(i int, s string) bool {
	return i > 0 && j.toks[i-1].kind == tkIdent && j.toks[i-1].text == s
}

func (j *jsAnalyzer) bufferDecode(open int) bool {
	if !j.isOp(open, "(") {
		return false
	}
	args, n, _ := callArgs(j.toks, open)
	if n < 2 {
		return false
	}
	enc, ok := literalArg(j.toks, args[1])
	return ok && (enc == "base64" || enc == "hex" || enc == "base64url")
}

func (j *jsAnalyzer) require(open int) {
	t := &j.toks[open]
	args, n, _ := callArgs(j.toks, open)
	if n == 0 {
		return
	}
	if mod, ok := literalArg(j.toks, args[0]); ok {
		j.module(mod, t)
		return
	}
	j.hit("js.import.dynamic", t)
}

func (j *jsAnalyzer) literalModule(open int) {
	args, n, _ := callArgs(j.toks, open)
	if n > 0 {
		if mod, ok := literalArg(j.toks, args[0]); ok {
			j.module(mod, &j.toks[open])
		}
	}
}

// importFrom finds the module string of an import/export declaration.
func (j *jsAnalyzer) importFrom(i int) {
	for k := i + 1; k < len(j.toks) && k < i+64; k++ {
		t := &j.toks[k]
		if t.kind == tkString && t.flags&tfRegex == 0 {
			if k == i+1 || j.toks[k-1].kind == tkIdent && j.toks[k-1].text == "from" {
				j.module(t.val, t)
			}
			return
		}
		if t.is(";") || t.kind == tkIdent && (t.text == "import" || t.text == "export") {
			return
		}
	}
}

// evalLike reports eval/Function/.constructor calls; a single literal
// argument is the milder literalID (when set).
func (j *jsAnalyzer) evalLike(open int, call bool, t *token, literalID, id string) {
	if literalID != "" && !call {
		j.hit(id, t) // indirect eval: (0, eval)(x), const e = eval
		return
	}
	if !j.isOp(open, "(") {
		j.hit(id, t)
		return
	}
	args, n, end := callArgs(j.toks, open)
	if _, ok := literalArg(j.toks, args[0]); literalID != "" && n == 1 && ok {
		j.hit(literalID, t)
	} else {
		j.hit(id, t)
		if j.execLine == 0 {
			j.execLine = int(t.line)
		}
	}
	for k := open; k < end; k++ {
		if a := &j.toks[k]; a.kind == tkIdent && (a.text == "atob" || a.text == "fromCharCode" ||
			a.text == "from" && j.bufferDecode(k+1)) {
			j.hit("js.obfuscation.base64_exec", t)
			return
		}
	}
}

func (j *jsAnalyzer) timer(open int) {
	args, n, _ := callArgs(j.toks, open)
	if n > 0 && j.toks[args[0].lo].kind == tkString && j.toks[args[0].lo].flags&tfRegex == 0 {
		j.hit("js.eval.timer_string", &j.toks[open])
	}
}

func (j *jsAnalyzer) globalAccess(t *token, k int) {
	if j.isOp(k+1, "[") {
		j.hit("js.reflect.global_computed", t)
		return
	}
	j.hit("js.reflect.global_object", t)
}

// concat finds dangerous names built from string pieces: 'chi'+'ld_process',
// String.fromCharCode(101,118,97,108), ['ev','al'].join(”).
func (j *jsAnalyzer) concat() {
	toks := j.toks
	for i := 0; i < len(toks); i++ {
		v, next, ok := j.piece(i)
		if !ok {
			continue
		}
		var b strings.Builder
		b.WriteString(v)
		anyBad, parts := isDangerousName(v), 1
		for next+1 < len(toks) && toks[next].is("+") {
			v2, n2, ok := j.piece(next + 1)
			if !ok {
				break
			}
			b.WriteString(v2)
			anyBad = anyBad || isDangerousName(v2)
			parts++
			next = n2
		}
		if isDangerousName(b.String()) && (toks[i].kind == tkIdent || parts > 1 && !anyBad) {
			j.hit("js.obfuscation.string_concat_name", &toks[i])
		}
		i = next - 1
	}
}

// piece reads a plain string literal or String.fromCharCode(n, ...).
func (j *jsAnalyzer) piece(i int) (string, int, bool) {
	toks := j.toks
	t := &toks[i]
	if t.kind == tkString && t.flags&(tfInterp|tfRegex|tfUnterminated) == 0 && t.text[0] != '}' {
		return unescape(t.val), i + 1, true
	}
	if t.kind == tkIdent && t.text == "String" && i+3 < len(toks) && toks[i+1].is(".") && toks[i+2].text == "fromCharCode" {
		args, n, end := callArgs(toks, i+3)
		var b strings.Builder
		for a := 0; a < n; a++ {
			if args[a].hi-args[a].lo != 1 || toks[args[a].lo].kind != tkNumber {
				return "", i + 1, false
			}
			c, err := strconv.ParseInt(toks[args[a].lo].text, 0, 32)
			if err != nil || c <= 0 || c >= 0x110000 {
				return "", i + 1, false
			}
			b.WriteRune(rune(c))
		}
		return b.String(), end + 1, n > 0
	}
	return "", i + 1, false
}

// jsfuck flags []/!/+ encodings: "![]", "+[]" and "[][" in quantity.
func (j *jsAnalyzer) jsfuck() {
	t := j.a.src.norm
	n := strings.Count(t, "![]") + strings.Count(t, "+[]") + strings.Count(t, "[][")
	if n >= 12 {
		j.a.c.add("js.obfuscation.jsfuck", j.a.src.lineAt(strings.Index(t, "[]")))
	}
}

const jsModPrefix = `(?:require\s*\(\s*|from\s+|import\s+)['"\x60](?:node:)?`

var jsRaw = []rawPattern{
	{id: "js.process.child_process", needles: []string{"child_process"}},
	{id: "js.eval.function_ctor", needles: []string{"constructor"},
		re: regexp.MustCompile(`\bconstructor\s*\(\s*['"\x60]|\[\s*['"\x60]constructor['"\x60]\s*\]|\.constructor\s*\.\s*constructor\b`)},
	{id: "js.eval.timer_string", needles: []string{"settimeout", "setinterval"},
		re: regexp.MustCompile(`\bset(?:timeout|interval)\s*\(\s*['"\x60]`)},
	{id: "js.import.module_loader", needles: []string{"mainmodule", "_load", "createrequire", "require.main.require", "module.constructor", "module.require", "_compile"},
		re: regexp.MustCompile(`\bprocess\s*\.\s*mainmodule\b|\bmodule\s*\.\s*(?:constructor|_load|require|_compile)\b|\b_load\s*\(|\bcreaterequire\s*\(|\brequire\s*\.\s*main\s*\.\s*require\b|\._compile\s*\(`)},
	{id: "js.ffi.native_binding", needles: []string{"binding", "dlopen", "ffi"},
		re: regexp.MustCompile(`\bprocess\s*\.\s*(?:binding|_linkedbinding|dlopen)\b|['"](?:ffi-napi|node-ffi|ffi|ref-napi)['"]`)},
	{id: "js.net.socket", needles: []string{"net", "dgram", "tls"},
		re: regexp.MustCompile(jsModPrefix + `(?:net|dgram|tls)['"\x60]|\bnet\s*\.\s*(?:connect|createconnection|createserver|socket)\s*\(`)},
	{id: "js.net.http_client", needles: []string{"fetch", "xmlhttprequest", "http", "axios", "websocket", "got", "undici", "request", "sendbeacon"},
		re: regexp.MustCompile(`\bfetch\s*\(|\bxmlhttprequest\b|\bnew\s+(?:websocket|eventsource)\b|\bsendbeacon\s*\(|` + jsModPrefix + `(?:https?|http2|axios|node-fetch|undici|got|request|superagent|ws)['"\x60]`)},
	{id: "js.vm.vm_module", needles: []string{"vm", "runin", "repl"},
		re: regexp.MustCompile(jsModPrefix + `(?:vm|repl)['"\x60]|\bvm\s*\.\s*(?:runin\w+|script|compilefunction|createcontext|sourcetextmodule)\b|\brunin(?:new|this)?context\s*\(`)},
	{id: "js.process.worker", needles: []string{"worker", "cluster"},
		re: regexp.MustCompile(jsModPrefix + `(?:worker_threads|cluster)['"\x60]|\bnew\s+worker\s*\(`)},
	{id: "js.process.runtime_spawn", needles: []string{"deno", "bun"},
		re: regexp.MustCompile(`\bdeno\s*\.\s*(?:run|command)\b|\bbun\s*\.\s*(?:spawn|spawnsync|\$)`)},
	{id: "js.fs.delete", needles: []string{"unlink", "rmdir", "rm", "rmsync"},
		re: regexp.MustCompile(`\b(?:fs|fsp|promises)\s*\.\s*(?:unlink|rm|rmdir)(?:sync)?\s*\(|\b(?:unlinksync|rmsync|rmdirsync)\s*\(`)},
	{id: "js.fs.write_outside_cwd", needles: []string{"write", "append", "copyfile", "symlink", "rename", "cp", "mkdir"},
		re:       regexp.MustCompile(`\b(?:writefile|writefilesync|appendfile|appendfilesync|createwritestream|copyfile|copyfilesync|symlink|symlinksync|rename|renamesync|cpsync|mkdirsync|mkdir)\s*\(\s*(?:['"\x60]([^'"\x60\n]+)['"\x60]|[^,()\n]+,\s*['"\x60]([^'"\x60\n]+)['"\x60])`),
		classify: classifyJSWrite},
	{id: "js.reflect.proto_pollution", needles: []string{"__proto__", "setprototypeof", "constructor.prototype", "object.prototype"}},
	{id: "js.reflect.global_computed", needles: []string{"globalthis", "global", "window", "self"},
		re: regexp.MustCompile(`\b(?:globalthis|global|window|self|frames)\s*\[`)},
	{id: "js.debug.inspector", needles: []string{"inspector"},
		re: regexp.MustCompile(jsModPrefix + `inspector['"\x60]`)},
	{id: "js.obfuscation.base64_exec", needles: []string{"atob", "base64", "hex"},
		re: regexp.MustCompile(`\b(?:eval|function|runin\w*context|compilefunction)\s*\([^\n]*(?:\batob\s*\(|buffer\s*\.\s*from\s*\([^)]*['"](?:base64|hex|base64url)['"])`)},
}

func classifyJSWrite(text string, m []int) string {
	if p := sub(text, m, 1); p != "" {
		return classifyWritePath("js", p)
	}
	return classifyWritePath("js", sub(text, m, 2))
}
