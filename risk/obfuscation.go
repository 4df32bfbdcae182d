package risk

import (
	"strings"
	"unicode/utf8"
)

// Thresholds for the language-independent obfuscation checks. They are
// deliberately loose enough for honest code (a UUID, a short hex digest, a
// few escapes in a binary protocol) and tight enough for packed payloads.
const (
	longLineRunes   = 1000
	base64BlobLen   = 120
	hexBlobLen      = 128
	escapeMinCount  = 16  // at least this many escapes...
	escapeDensity   = 48  // ...and one per this many bytes,
	escapeHardCount = 128 // or this many regardless of density.
)

// isBadControl reports C0 controls other than tab, LF, FF and CRLF. A lone
// CR is a newline to Python and JavaScript but not to bash or to most review
// UIs, which makes it a way to hide a line.
func isBadControl(s string, i int) bool {
	b := s[i]
	switch {
	case b == '\t' || b == '\f':
		return false
	case b == '\r':
		return i+1 >= len(s) || s[i+1] != '\n'
	default:
		return b < 0x20 || b == 0x7f
	}
}

func classifyRune(r rune, off int) string {
	switch {
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069, r == 0x200E, r == 0x200F, r == 0x061C:
		return "obfuscation.bidi_control"
	case r >= 0x200B && r <= 0x200D, r >= 0x2060 && r <= 0x2064, r == 0x00AD, r == 0x180E,
		r == 0x034F, r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0, r == 0x17B4, r == 0x17B5,
		r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0000 && r <= 0xE01EF:
		return "obfuscation.invisible_char"
	case r == 0xFEFF && off != 0:
		return "obfuscation.invisible_char"
	case r >= 0x80 && r < 0xA0:
		return "obfuscation.control_char"
	}
	return ""
}

// scanNFKC reports text that NFKC changes, at the first differing line.
func scanNFKC(s *source, c *collector) {
	if s.norm == s.orig {
		return
	}
	i := 0
	for i < len(s.orig) && i < len(s.norm) && s.orig[i] == s.norm[i] {
		i++
	}
	c.add("obfuscation.nfkc_changed", lineOfOffset(s.orig, i))
}

// Byte classes for scanText.
const (
	bcHex uint8 = 1 << iota
	bcB64
	bcDigit
	bcUpper
	bcLower
	bcSpecial // newline, control byte or non-ASCII: needs a closer look
)

var textClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		switch {
		case b >= '0' && b <= '9':
			t[c] = bcHex | bcB64 | bcDigit
		case b >= 'a' && b <= 'f':
			t[c] = bcHex | bcB64 | bcLower
		case b >= 'A' && b <= 'F':
			t[c] = bcHex | bcB64 | bcUpper
		case b >= 'g' && b <= 'z':
			t[c] = bcB64 | bcLower
		case b >= 'G' && b <= 'Z':
			t[c] = bcB64 | bcUpper
		case b == '+' || b == '/' || b == '=' || b == '-' || b == '_':
			t[c] = bcB64
		case b < 0x20 && b != '\t' || b >= 0x7f:
			t[c] = bcSpecial
		}
	}
	return t
}()

// textScan is the state of scanText's single pass.
type textScan struct {
	c                *collector
	line, lineStart  int
	blobStart, hexes int
	seen             uint8
	nonASCII         bool
}

// scanText walks the original text once, looking for what the interpreter
// sees but a reviewer does not (invalid UTF-8, bidi controls, invisible
// characters, stray control bytes, overlong lines) and for long base64
// (mixed case and digits) or hex runs.
// It returns whether t is pure ASCII.
func scanText(t string, c *collector) bool {
	st := textScan{c: c, line: 1}
	for i := 0; i < len(t); i++ {
		k := textClass[t[i]]
		if k&bcB64 != 0 {
			st.seen |= k
			if k&bcHex != 0 {
				st.hexes++
			} else if st.hexes < hexBlobLen {
				st.hexes = 0
			}
			continue
		}
		st.endBlob(i)
		if k&bcSpecial != 0 {
			i = st.special(t, i)
			st.blobStart = i + 1
		}
	}
	st.endBlob(len(t))
	st.endLine(t, len(t))
	return !st.nonASCII
}

func (st *textScan) endBlob(i int) {
	n := i - st.blobStart
	if st.hexes >= hexBlobLen || n >= base64BlobLen && st.seen&(bcDigit|bcUpper|bcLower) == bcDigit|bcUpper|bcLower {
		st.c.add("obfuscation.encoded_blob", st.line)
	}
	st.blobStart, st.hexes, st.seen = i+1, 0, 0
}

func (st *textScan) endLine(t string, i int) {
	if i-st.lineStart > longLineRunes && utf8.RuneCountInString(t[st.lineStart:i]) > longLineRunes {
		st.c.add("obfuscation.long_line", st.line)
	}
}

// special handles the byte at i and returns the index of its last byte.
func (st *textScan) special(t string, i int) int {
	b := t[i]
	switch {
	case b == '\n':
		st.endLine(t, i)
		st.line++
		st.lineStart = i + 1
	case b < utf8.RuneSelf:
		if isBadControl(t, i) {
			st.c.add("obfuscation.control_char", st.line)
		}
	default:
		st.nonASCII = true
		r, n := utf8.DecodeRuneInString(t[i:])
		if r == utf8.RuneError && n == 1 {
			st.c.add("obfuscation.invalid_utf8", st.line)
		} else if id := classifyRune(r, i); id != "" {
			st.c.add(id, st.line)
		}
		return i + n - 1
	}
	return i
}

// scanEscapes reports a high density of character-code tricks.
func scanEscapes(s *source, c *collector) {
	t := s.norm
	n := strings.Count(t, `\x`) + strings.Count(t, `\u`) + strings.Count(t, "chr(") +
		strings.Count(t, "fromCharCode") + strings.Count(t, "\\0")
	if n < escapeMinCount || (n*escapeDensity < len(t) && n < escapeHardCount) {
		return
	}
	first := len(t)
	for _, k := range []string{`\x`, `\u`, "chr(", "fromCharCode", "\\0"} {
		if j := strings.Index(t, k); j >= 0 && j < first {
			first = j
		}
	}
	c.add("obfuscation.char_code_density", s.lineAt(first))
}

// scanShared runs the language-independent checks that need the
// normalised text (scanText runs first, on the original).
func scanShared(s *source, c *collector) {
	scanNFKC(s, c)
	scanEscapes(s, c)
}
