package risk

import (
	"sort"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// source holds the three views of one input that the analysis needs.
//
// Tokenizers read orig, because that is what the interpreter reads: bash and
// node never normalise, and Python normalises identifiers only (PEP 3131).
// Tokenising the NFKC text instead would let a full-width quote (U+FF02),
// which NFKC maps to '"', hide real bash code inside a fake string. Raw
// pattern matching reads norm/lower, so full-width spellings of dangerous
// names still match. When norm differs from orig an obfuscation pattern
// fires, so a SAFE proof only ever happens on text where the views agree.
type source struct {
	orig string
	norm string // NFKC

	newlines []int // offsets of '\n' in norm, built on first use
	indexed  bool
}

// newSource normalises code; ascii reports that code has no byte >= 0x80
// (ASCII is already NFKC, so the normaliser is skipped).
func newSource(code string, ascii bool) *source {
	n := code
	if !ascii {
		n = norm.NFKC.String(code)
	}
	return &source{orig: code, norm: n}
}

// asciiLower lowers ASCII letters only; the result has the same byte
// offsets as the input. strings.ToLower may change the byte
// length of non-ASCII text, which would break offset-to-line mapping, and
// every pattern we match is ASCII anyway.
func asciiLower(s string) string {
	i := 0
	for i < len(s) && !(s[i] >= 'A' && s[i] <= 'Z') {
		i++
	}
	if i == len(s) {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		if c := b[i]; c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// lineAt maps a byte offset in norm to a 1-based line number.
func (s *source) lineAt(off int) int {
	if !s.indexed {
		s.indexed = true
		for i := 0; i < len(s.norm); {
			j := strings.IndexByte(s.norm[i:], '\n')
			if j < 0 {
				break
			}
			s.newlines = append(s.newlines, i+j)
			i += j + 1
		}
	}
	return sort.SearchInts(s.newlines, off) + 1
}

// countLines is the number of lines as reported to users and rules: the
// number of '\n' plus one, and 0 for empty input. NFKC never adds or removes
// '\n', so it is the same for the original and the normalised text.
func countLines(s string) int {
	if s == "" {
		return 0
	}
	return strings.Count(s, "\n") + 1
}

// lineOfOffset counts lines in s up to off without an index; used for the
// rare single lookups on the original text.
func lineOfOffset(s string, off int) int {
	if off > len(s) {
		off = len(s)
	}
	return strings.Count(s[:off], "\n") + 1
}
