package risk

import (
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Hit caps keep the Assessment (which is sent to OPA on every request) small
// even for adversarial inputs with thousands of matches: the first few hits
// of an id already carry all the information the policy needs.
const (
	maxHitsPerID = 8
	maxHits      = 256
)

type hit struct {
	id   string
	line int
}

// collector gathers hits in the order they are found; finish sorts,
// dedupes and turns them into Patterns.
type collector struct {
	hits  []hit
	perID map[string]uint8
}

func (c *collector) add(id string, line int) {
	if len(c.hits) >= maxHits {
		return
	}
	if c.perID == nil {
		c.perID = make(map[string]uint8, 8)
	}
	n := c.perID[id]
	if n >= maxHitsPerID {
		return
	}
	c.perID[id] = n + 1
	c.hits = append(c.hits, hit{id, line})
}

func (c *collector) empty() bool { return len(c.hits) == 0 }

func (c *collector) has(id string, line int) bool {
	if c.perID[id] == 0 {
		return false
	}
	for _, h := range c.hits {
		if h.line == line && h.id == id {
			return true
		}
	}
	return false
}

// patterns returns the hits as sorted (line, id), deduplicated Patterns.
// It is never nil so the JSON is always an array.
func (c *collector) patterns() []Pattern {
	sort.Slice(c.hits, func(i, j int) bool {
		if c.hits[i].line != c.hits[j].line {
			return c.hits[i].line < c.hits[j].line
		}
		return c.hits[i].id < c.hits[j].id
	})
	out := make([]Pattern, 0, len(c.hits))
	for i, h := range c.hits {
		if i > 0 && h == c.hits[i-1] {
			continue
		}
		d, ok := catalog[h.id]
		if !ok {
			d = def{HIGH, "unknown pattern"}
		}
		out = append(out, Pattern{ID: h.id, Message: d.msg, Line: h.line, Level: d.level})
	}
	return out
}

// rawPattern matches the normalised text (ASCII-lowercased unless cased),
// strings and comments included:
// payloads live in strings, so literals are never stripped here.
//
// A pattern runs only if one of its needles occurs (a substring search is
// far cheaper than a regex scan). With re nil every needle occurrence is a
// hit. classify, when set, turns a match's submatches into an id (or "" to
// drop it), for checks RE2 cannot express such as back-references.
type rawPattern struct {
	id       string
	needles  []string
	re       *regexp.Regexp
	cased    bool // run re on the text as is, not lowercased (needles always ignore ASCII case)
	word     bool // a needle must not follow an identifier byte ("nc " but not "func ")
	classify func(text string, m []int) string
}

// Regexes run on windows, not on the whole text: the line around each
// needle occurrence, clipped to rawWindow bytes either side, each window
// scanned once, at most rawMaxWindows per pattern. Go's RE2 is linear but
// slow (tens of ns per byte), so scanning 4 KiB per pattern would cost
// milliseconds; windows keep a typical request in microseconds and an
// adversarial 256 KiB input bounded. Raw patterns are therefore line-local.
const (
	rawWindow     = 256
	rawMaxWindows = 128
)

// rawSet is a language's raw patterns with their needle matcher.
type rawSet struct {
	ps []rawPattern
	m  *matcher
}

func newRawSet(ps []rawPattern) rawSet { return rawSet{ps: ps, m: newMatcher(ps)} }

var hitPool = sync.Pool{New: func() any { s := make([]uint64, 0, 64); return &s }}

func runRaw(rs *rawSet, s *source, c *collector) {
	bufp := hitPool.Get().(*[]uint64)
	hits := rs.m.scan(s.norm, (*bufp)[:0])
	for k := 0; k < len(hits); {
		pat := hits[k] >> 32
		j := k
		for j < len(hits) && hits[j]>>32 == pat {
			j++
		}
		p := &rs.ps[pat]
		if p.re == nil {
			for _, h := range hits[k:j] {
				c.add(p.id, s.lineAt(int(uint32(h))))
			}
		} else {
			runWindows(p, s.norm, hits[k:j], s, c)
		}
		k = j
	}
	*bufp = hits
	hitPool.Put(bufp)
}

func runWindows(p *rawPattern, text string, pos []uint64, s *source, c *collector) {
	done, windows := 0, 0
	for _, h := range pos {
		j := int(uint32(h))
		if j < done {
			continue
		}
		if p.word && j > 0 && isIdentASCII(text[j-1]) {
			continue
		}
		if windows++; windows > rawMaxWindows {
			return
		}
		lo := max(strings.LastIndexByte(text[:j], '\n')+1, j-rawWindow, done)
		hi := len(text)
		if k := strings.IndexByte(text[j:], '\n'); k >= 0 {
			hi = j + k
		}
		hi = min(hi, j+rawWindow)
		if c.has(p.id, s.lineAt(j)) {
			done = hi
			continue // the tokens already reported this line
		}
		w := text[lo:hi]
		if !p.cased {
			w = asciiLower(w) // same offsets; patterns are written in lowercase
		}
		for _, m := range p.re.FindAllStringSubmatchIndex(w, maxHitsPerID) {
			id := p.id
			if p.classify != nil {
				id = p.classify(w, m)
			}
			if id != "" {
				c.add(id, s.lineAt(lo+m[0]))
			}
		}
		done = hi
	}
}

func sub(text string, m []int, g int) string {
	if 2*g+1 >= len(m) || m[2*g] < 0 {
		return ""
	}
	return text[m[2*g]:m[2*g+1]]
}

// shellPayloads are shell one-liners that are dangerous wherever they
// appear: in a bash script, or in a Python/JS string handed to a shell.
// The ids are the bash ones; other languages report <lang>.shell.<name>.
var shellPayloads = []rawPattern{
	{id: "bash.fs.rm_rf_root", needles: []string{"rm "},
		re: regexp.MustCompile(`\brm\s+(?:-{1,2}[a-z-]+\s+)+(?:/\*?|~/?\*?|\$\{?home\}?/?\*?)(?:\s|$|[;&|)'"` + "`" + `])`)},
	{id: "bash.dos.fork_bomb", needles: []string{"(){", "() {", "( )"},
		re:       regexp.MustCompile(`([a-z_][a-z0-9_]*|:)\s*\(\s*\)\s*\{\s*([a-z_][a-z0-9_]*|:)\s*\|\s*([a-z_][a-z0-9_]*|:)\s*&`),
		classify: classifyForkBomb},
	{id: "bash.disk.mkfs", needles: []string{"mkfs", "mke2fs", "mkswap", "wipefs"},
		re: regexp.MustCompile(`\b(?:mkfs(?:\.[a-z0-9]+)?|mke2fs|mkswap|wipefs)\s+(?:-\S+\s+)*/dev/`)},
	{id: "bash.disk.dd_device", needles: []string{"of=/dev/"},
		re: regexp.MustCompile(`\bdd\b[^\n;|&]*\bof=/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|mapper|md|loop|dm-|sr|mem|kmem|port)`)},
	{id: "bash.net.curl_pipe_shell", needles: []string{"curl", "wget"},
		re: regexp.MustCompile(`\b(?:curl|wget)\b[^\n;&]*\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+)?(?:(?:ba|z|da|k|c|tc|fi|a)?sh|python[0-9.]*|perl|ruby|node|php)\b|\b(?:(?:ba|z|da|k)?sh|source|\.)\s+(?:-s\s+)?<\(\s*(?:curl|wget)\b|\b(?:(?:ba|z|da|k)?sh\s+-c|eval)\s+["']?\$\(\s*(?:curl|wget)\b`)},
	{id: "bash.net.dev_tcp", needles: []string{"/dev/tcp/", "/dev/udp/"}},
	{id: "bash.net.reverse_shell", word: true, needles: []string{"nc ", "ncat ", "netcat ", "socat ", "sh -i", "mkfifo "},
		re: regexp.MustCompile(`\b(?:nc|ncat|netcat)\b[^\n|;&]*\s-[a-z]*[ec]\s|\bsocat\b[^\n]*\bexec:|\b(?:ba)?sh\s+-i\s*[<>]&|\bmkfifo\b[^\n]*\|\s*(?:nc|ncat|netcat)\b`)},
	{id: "bash.obfuscation.base64_exec", needles: []string{"base64", "xxd", "openssl", "uudecode"},
		re: regexp.MustCompile(`\b(?:base64\s+(?:-[a-z]*d\b|--decode)|xxd\s+-[a-z]*r|openssl\s+(?:enc\s+)?-?(?:base64|a)\s+-d|uudecode)\b[^\n;&]*\|\s*(?:sudo\s+)?(?:(?:ba|z|da|k)?sh|python[0-9.]*|perl|ruby|node)\b|\b(?:eval|(?:ba|z|da|k)?sh\s+-c)\s+["']?\$\([^)\n]*\bbase64\s+(?:-[a-z]*d\b|--decode)`)},
}

func classifyForkBomb(text string, m []int) string {
	a, b, c := sub(text, m, 1), sub(text, m, 2), sub(text, m, 3)
	if a == b && b == c {
		return "bash.dos.fork_bomb"
	}
	return ""
}

// commonRaw applies to every language; ids get the language prefix.
var sensitivePathNeedles = []string{
	"/etc/shadow", "/etc/passwd", "/etc/sudoers", "/etc/gshadow", ".ssh/", "id_rsa", "id_ed25519",
	"/proc/self/environ", "/proc/self/mem", "/proc/1/", ".aws/credentials", ".kube/config",
	".docker/config.json", ".netrc", ".git-credentials", ".bash_history", "/var/run/secrets",
	".gnupg/", ".pgpass",
}

// langRaw returns shellPayloads (renamed for non-bash languages) followed by
// the common patterns, with ids prefixed by lang.
func langRaw(lang string) []rawPattern {
	out := make([]rawPattern, 0, len(shellPayloads)+2)
	for _, p := range shellPayloads {
		if lang != "bash" {
			p.id = lang + ".shell." + p.id[strings.LastIndexByte(p.id, '.')+1:]
			if p.classify != nil {
				id := p.id
				p.classify = func(text string, m []int) string {
					if classifyForkBomb(text, m) != "" {
						return id
					}
					return ""
				}
			}
		}
		out = append(out, p)
	}
	return append(out,
		rawPattern{id: lang + ".secrets.sensitive_path", needles: sensitivePathNeedles},
		rawPattern{id: lang + ".escape.docker_socket", needles: []string{"docker.sock"}},
	)
}
