package risk

import (
	"regexp"
	"strconv"
	"strings"
)

var pythonLang = language{raw: newRawSet(append(pythonRaw, langRaw("python")...)), analyze: analyzePython}

// pyAnalyzer walks Python tokens once per check. alias maps a local name to
// what it stands for ("sp" -> "subprocess", "system" -> "os.system").
type pyAnalyzer struct {
	a          *analysis
	toks       []token
	alias      map[string]string
	star       []string
	hasDecoder bool
	execLine   int
}

func analyzePython(a *analysis) {
	bufp := getTokens()
	toks, bad := lexPython(a.src.orig, (*bufp)[:0])
	defer func() { *bufp = toks; putTokens(bufp) }()

	a.calls = make([]string, 0, 64)
	p := &pyAnalyzer{a: a, toks: toks}
	p.encodingDecl()
	p.identifiers()
	p.importStmts()
	p.names()
	p.concat()
	if p.hasDecoder && p.execLine > 0 {
		a.c.add("python.obfuscation.base64_exec", p.execLine)
	}
	a.rawPatterns()
	if !bad && a.c.empty() {
		a.proven = provePython(toks, a.src.norm)
	}
}

func (p *pyAnalyzer) hit(id string, t *token) { p.a.c.add(id, int(t.line)) }

var pyCoding = regexp.MustCompile(`^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)`)

// encodingDecl flags PEP 263 declarations other than UTF-8: a source read
// as utf-7 or unicode_escape is not the text any reviewer (or we) saw.
func (p *pyAnalyzer) encodingDecl() {
	src := p.a.src.orig
	for line := 1; line <= 2 && src != ""; line++ {
		l, rest, _ := strings.Cut(src, "\n")
		if m := pyCoding.FindStringSubmatch(l); m != nil {
			switch strings.ToLower(strings.ReplaceAll(m[1], "_", "-")) {
			case "utf-8", "utf8", "ascii", "us-ascii":
			default:
				p.a.c.add("python.obfuscation.source_encoding", line)
			}
			return
		}
		src = rest
	}
}

// identifiers reports non-ASCII identifiers; Python NFKC-normalises them, so
// ｅｖａｌ is eval.
func (p *pyAnalyzer) identifiers() {
	for i := range p.toks {
		t := &p.toks[i]
		if t.kind != tkIdent || t.flags&tfNonASCII == 0 {
			continue
		}
		if t.flags&tfNFKCChanged != 0 {
			p.hit("obfuscation.nfkc_identifier", t)
		} else {
			p.hit("obfuscation.non_ascii_identifier", t)
		}
	}
}

func (p *pyAnalyzer) importStmts() {
	for i := 0; i < len(p.toks); i++ {
		t := &p.toks[i]
		if t.kind != tkIdent || (i > 0 && p.toks[i-1].is(".")) {
			continue
		}
		switch t.text {
		case "import":
			i = p.plainImport(i + 1)
		case "from":
			i = p.fromImport(i + 1)
		}
	}
}

// dotted reads a dotted name at i and returns it and the next index.
func (p *pyAnalyzer) dotted(i int) (string, int) {
	if i >= len(p.toks) || p.toks[i].kind != tkIdent {
		return "", i
	}
	name := p.toks[i].text
	for i+2 < len(p.toks) && p.toks[i+1].is(".") && p.toks[i+2].kind == tkIdent {
		name += "." + p.toks[i+2].text
		i += 2
	}
	return name, i + 1
}

func (p *pyAnalyzer) isIdent(i int, s string) bool {
	return i < len(p.toks) && p.toks[i].kind == tkIdent && p.toks[i].text == s
}

func (p *pyAnalyzer) setAlias(local, target string) {
	if p.alias == nil {
		p.alias = make(map[string]string, 8)
	}
	p.alias[local] = target
}

func (p *pyAnalyzer) plainImport(i int) int {
	for {
		name, j := p.dotted(i)
		if name == "" {
			return j
		}
		p.imported(name, &p.toks[i])
		root, _, _ := strings.Cut(name, ".")
		if p.isIdent(j, "as") && j+1 < len(p.toks) {
			p.setAlias(p.toks[j+1].text, name)
			j += 2
		} else {
			p.setAlias(root, root)
		}
		if j >= len(p.toks) || !p.toks[j].is(",") {
			return j
		}
		i = j + 1
	}
}

func (p *pyAnalyzer) fromImport(i int) int {
	for i < len(p.toks) && (p.toks[i].is(".") || p.toks[i].is("...")) {
		i++
	}
	mod, j := p.dotted(i)
	if !p.isIdent(j, "import") {
		return i // "raise X from Y", "yield from"
	}
	if mod != "" {
		p.imported(mod, &p.toks[i])
	}
	for j++; j < len(p.toks); j++ {
		t := &p.toks[j]
		switch {
		case t.is("*"):
			p.star = append(p.star, mod)
		case t.kind == tkIdent && !(j > 0 && p.toks[j-1].is("as")):
			local := t.text
			if p.isIdent(j+1, "as") && j+2 < len(p.toks) {
				local = p.toks[j+2].text
			}
			p.setAlias(local, mod+"."+t.text)
			if id := pyNameID(mod + "." + t.text); id != "" {
				p.hit(id, t)
			}
		case t.is(",") || t.is("(") || t.is(")") || t.kind == tkIdent:
		default:
			return j
		}
	}
	return j
}

func (p *pyAnalyzer) imported(mod string, t *token) {
	p.a.imports = append(p.a.imports, mod)
	if id := pyModuleID(mod); id != "" {
		p.hit(id, t)
	}
}

// pyModuleID maps a module (by its top-level package) to a pattern id.
func pyModuleID(mod string) string {
	root, _, _ := strings.Cut(mod, ".")
	return pyModules[root]
}

// pyNameID classifies a resolved dotted name.
func pyNameID(name string) string {
	if id, ok := pyCalls[name]; ok {
		return id
	}
	if rest, ok := strings.CutPrefix(name, "os."); ok && (strings.HasPrefix(rest, "exec") || strings.HasPrefix(rest, "spawn")) {
		return "python.process.os_system"
	}
	if strings.IndexByte(name, '.') > 0 {
		return pyModuleID(name)
	}
	return ""
}

// names walks every name chain (a, a.b.c, and .m on an expression),
// resolving aliases, recording calls and checking them.
func (p *pyAnalyzer) names() {
	toks := p.toks
	for i := 0; i < len(toks); i++ {
		if toks[i].kind != tkIdent {
			continue
		}
		j := i
		for j+2 < len(toks) && toks[j+1].is(".") && toks[j+2].kind == tkIdent {
			j += 2
		}
		if j == i && !(j+1 < len(toks) && toks[j+1].is("(")) && !(i > 0 && toks[i-1].is(".")) {
			continue // a plain variable reference: nothing to resolve or check
		}
		name := p.resolve(i, j)
		if i > 0 && toks[i-1].is(".") {
			name = "." + name
		}
		call := j+1 < len(toks) && toks[j+1].is("(")
		if call {
			p.a.calls = append(p.a.calls, name)
		}
		p.checkName(name, i, j, call)
		i = j
	}
}

// resolve returns the chain toks[i..j] as text, with its root replaced by
// what an import alias stands for.
func (p *pyAnalyzer) resolve(i, j int) string {
	var name string
	first, last := &p.toks[i], &p.toks[j]
	if end := int(last.pos) + len(last.text); last.flags&tfNFKCChanged == 0 && first.flags&tfNFKCChanged == 0 &&
		end-int(first.pos) == chainLen(p.toks[i:j+1]) {
		name = p.a.src.orig[first.pos:end]
	} else {
		var b strings.Builder
		for k := i; k <= j; k += 2 {
			if k > i {
				b.WriteByte('.')
			}
			b.WriteString(p.toks[k].text)
		}
		name = b.String()
	}
	if i > 0 && p.toks[i-1].is(".") {
		return name
	}
	if m, ok := p.alias[first.text]; ok && m != first.text {
		return m + name[len(first.text):]
	}
	if first.text == name {
		for _, mod := range p.star {
			if id := pyNameID(mod + "." + name); id != "" {
				return mod + "." + name
			}
		}
	}
	return name
}

func chainLen(ts []token) int {
	n := 0
	for i := range ts {
		n += len(ts[i].text)
	}
	return n
}

func (p *pyAnalyzer) checkName(name string, i, j int, call bool) {
	t := &p.toks[i]
	dotted := strings.IndexByte(name, '.') > 0
	if !call && !dotted {
		return // a plain variable reference
	}
	if id := pyNameID(name); id != "" {
		p.hit(id, t)
	}
	if !call {
		return
	}
	if pyDecoders[p.toks[j].text] {
		p.hasDecoder = true
	}
	switch strings.TrimPrefix(name, "builtins.") {
	case "eval", "exec", "compile", "execfile":
		p.evalCall(j + 1)
	case "__import__", "importlib.import_module", "importlib.__import__":
		p.dynImport(j + 1)
	case "getattr", "setattr", "delattr":
		p.getattrCall(j + 1)
	case "globals", "locals", "vars":
		p.hit("python.reflect.globals", t)
	case ".system", ".popen", ".spawnv", ".execv", ".execve", ".execl":
		p.hit("python.process.os_system", t)
	case ".load_module", ".exec_module":
		p.hit("python.import.dynamic", t)
	default:
		p.writeCall(name, i, j+1)
	}
}

var pyDecoders = map[string]bool{
	"b64decode": true, "b32decode": true, "b16decode": true, "a85decode": true, "b85decode": true,
	"standard_b64decode": true, "urlsafe_b64decode": true, "decodebytes": true, "decodestring": true,
	"unhexlify": true, "a2b_base64": true, "a2b_hex": true, "fromhex": true, "decompress": true,
}

var pyCodecNames = map[string]bool{
	"rot13": true, "rot_13": true, "base64": true, "base_64": true, "hex": true, "hex_codec": true,
	"zlib": true, "bz2": true, "uu": true, "base64_codec": true, "zlib_codec": true,
}

func (p *pyAnalyzer) evalCall(open int) {
	args, n, end := callArgs(p.toks, open)
	t := &p.toks[open]
	if n == 0 {
		return
	}
	if _, ok := literalArg(p.toks, args[0]); ok {
		p.hit("python.eval.exec_literal", t)
	} else {
		p.hit("python.eval.exec", t)
		if p.execLine == 0 {
			p.execLine = int(t.line)
		}
	}
	for k := open; k < end; k++ {
		a := &p.toks[k]
		if a.kind == tkIdent && (pyDecoders[a.text] || a.text == "decode" && k > 1 && p.toks[k-2].text == "codecs") ||
			a.kind == tkString && pyCodecNames[strings.ToLower(a.val)] {
			p.hit("python.obfuscation.base64_exec", t)
			return
		}
	}
}

func (p *pyAnalyzer) dynImport(open int) {
	t := &p.toks[open]
	p.hit("python.import.dynamic", t)
	args, n, _ := callArgs(p.toks, open)
	if n == 0 {
		return
	}
	if mod, ok := literalArg(p.toks, args[0]); ok {
		if id := pyModuleID(mod); id != "" {
			p.hit(id, t)
		}
	}
}

func (p *pyAnalyzer) getattrCall(open int) {
	t := &p.toks[open]
	args, n, _ := callArgs(p.toks, open)
	if n < 2 {
		p.hit("python.reflect.getattr", t)
		return
	}
	if name, ok := literalArg(p.toks, args[1]); ok && !isDangerousName(unescape(name)) {
		p.hit("python.reflect.getattr", t)
		return
	}
	p.hit("python.reflect.getattr_dynamic", t)
}

// concat finds names built from pieces: 'ev'+'al', 'o' 's', chr(111)+chr(115),
// "".join(['o','s']). Values are only decoded for runs of two or more.
func (p *pyAnalyzer) concat() {
	toks := p.toks
	for i := 0; i < len(toks); i++ {
		if toks[i].kind != tkString && !(toks[i].kind == tkIdent && toks[i].text == "chr") {
			continue
		}
		if toks[i].kind == tkString && i+3 < len(toks) && toks[i+1].is(".") && toks[i+2].text == "join" && toks[i+3].is("(") {
			p.joinCall(i)
			continue
		}
		ends := p.run(i)
		if len(ends) < 2 {
			continue
		}
		var b strings.Builder
		anyBad := false
		for k, start := 0, i; k < len(ends); k++ {
			v, _, _ := p.piece(start)
			b.WriteString(v)
			anyBad = anyBad || isDangerousName(v)
			start = ends[k]
			if start < len(toks) && toks[start].is("+") {
				start++
			}
		}
		if !anyBad && isDangerousName(b.String()) {
			p.hit("python.obfuscation.string_concat_name", &toks[i])
		}
		i = ends[len(ends)-1] - 1
	}
}

// run returns the end index of each piece in the concatenation run at i.
func (p *pyAnalyzer) run(i int) []int {
	var ends []int
	for {
		next, ok := p.pieceEnd(i)
		if !ok || len(ends) >= 32 {
			return ends
		}
		ends = append(ends, next)
		switch {
		case next < len(p.toks) && p.toks[next].is("+"):
			i = next + 1
		case next < len(p.toks) && p.toks[next].kind == tkString:
			i = next
		default:
			return ends
		}
	}
}

// pieceEnd is piece without decoding: the index after the operand.
func (p *pyAnalyzer) pieceEnd(i int) (int, bool) {
	toks := p.toks
	if i >= len(toks) {
		return i, false
	}
	t := &toks[i]
	if t.kind == tkString && t.flags&(tfInterp|tfUnterminated) == 0 {
		return i + 1, true
	}
	if t.kind == tkIdent && t.text == "chr" && i+3 < len(toks) && toks[i+1].is("(") &&
		toks[i+2].kind == tkNumber && toks[i+3].is(")") {
		return i + 4, true
	}
	return i + 1, false
}

// piece reads one concatenation operand: a plain string or chr(N).
func (p *pyAnalyzer) piece(i int) (string, int, bool) {
	toks := p.toks
	t := &toks[i]
	if t.kind == tkString && t.flags&(tfInterp|tfUnterminated) == 0 {
		if t.flags&tfRaw != 0 {
			return t.val, i + 1, true
		}
		return unescape(t.val), i + 1, true
	}
	if t.kind == tkIdent && t.text == "chr" && i+3 < len(toks) && toks[i+1].is("(") &&
		toks[i+2].kind == tkNumber && toks[i+3].is(")") {
		n, err := strconv.ParseInt(toks[i+2].text, 0, 32)
		if err == nil && n > 0 && n < 0x110000 {
			return string(rune(n)), i + 4, true
		}
	}
	return "", i + 1, false
}

func (p *pyAnalyzer) joinCall(i int) {
	_, _, end := callArgs(p.toks, i+3)
	var b strings.Builder
	for k := i + 4; k < end; k++ {
		t := &p.toks[k]
		switch {
		case t.kind == tkString:
			b.WriteString(unescape(t.val))
		case t.is(",") || t.is("[") || t.is("]") || t.is("(") || t.is(")"):
		default:
			return
		}
	}
	if isDangerousName(b.String()) {
		p.hit("python.obfuscation.string_concat_name", &p.toks[i])
	}
}

// pyWriteDest maps calls that create or overwrite files to the argument
// holding the destination.
var pyWriteDest = map[string]int{
	"shutil.copy": 1, "shutil.copyfile": 1, "shutil.copy2": 1, "shutil.copytree": 1, "shutil.move": 1,
	"os.rename": 1, "os.replace": 1, "os.symlink": 1, "os.link": 1, "os.mkdir": 0, "os.makedirs": 0,
}

var pyPathWriters = setOf(".write_text", ".write_bytes", ".touch", ".mkdir", ".symlink_to", ".hardlink_to")

// writeCall classifies literal destinations of file writes: open(path,
// "w"), Path("/x").write_text(...), shutil.copy(src, "/x").
func (p *pyAnalyzer) writeCall(name string, i, open int) {
	t := &p.toks[i]
	args, n, _ := callArgs(p.toks, open)
	switch {
	case name == "open" || name == "io.open" || name == "codecs.open":
		if n > 0 && p.writeMode(args, n) {
			p.classifyArg(args[0], t)
		}
	case pyPathWriters[name] && i >= 2 && p.toks[i-1].is(".") && p.toks[i-2].is(")"):
		if o := matchOpen(p.toks, i-2); o > 0 && p.toks[o-1].kind == tkIdent && strings.HasSuffix(p.toks[o-1].text, "Path") {
			if a, m, _ := callArgs(p.toks, o); m > 0 {
				p.classifyArg(a[0], t)
			}
		}
	default:
		if k, ok := pyWriteDest[name]; ok && k < n {
			p.classifyArg(args[k], t)
		}
	}
}

// writeMode reports a literal mode with w, a, x or + (positional or mode=).
func (p *pyAnalyzer) writeMode(args [4]span, n int) bool {
	for a := 1; a < n; a++ {
		sp := args[a]
		if sp.hi-sp.lo == 3 && p.toks[sp.lo].text == "mode" && p.toks[sp.lo+1].is("=") {
			sp.lo += 2
		}
		if v, ok := literalArg(p.toks, sp); ok && (a == 1 || sp != args[a]) {
			return strings.ContainsAny(v, "wax+")
		}
	}
	return false
}

func (p *pyAnalyzer) classifyArg(a span, t *token) {
	if v, ok := literalArg(p.toks, a); ok {
		if id := classifyWritePath("python", strings.ToLower(v)); id != "" {
			p.hit(id, t)
		}
	}
}

// matchOpen returns the index of the '(' matching the ')' at close, or -1.
func matchOpen(toks []token, close int) int {
	depth := 0
	for k := close; k >= 0; k-- {
		switch {
		case toks[k].is(")") || toks[k].is("]") || toks[k].is("}"):
			depth++
		case toks[k].is("(") || toks[k].is("[") || toks[k].is("{"):
			depth--
			if depth == 0 {
				return k
			}
		}
	}
	return -1
}
