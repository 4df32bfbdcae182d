package risk

import "sort"

// matcher finds every needle of a language's raw patterns in one pass over
// the text, ignoring ASCII case (an Aho-Corasick automaton compiled to a DFA over byte
// classes). Running strings.Index once per needle would scan the text about
// a hundred times per request; this scans it once.
type matcher struct {
	class   [256]int32 // byte -> class; 0 is "no needle uses this byte"
	classes int
	// next maps state*classes + class to the next state's row offset
	// (state*classes), negated when that state has outputs: the scan loop
	// then does one load per byte and a sign test.
	next []int32
	out  [][]acOut
}

type acOut struct {
	pat int32 // index into the pattern slice
	n   int32 // needle length
}

func newMatcher(ps []rawPattern) *matcher {
	m := &matcher{classes: 1}
	for _, p := range ps {
		for _, n := range p.needles {
			for i := 0; i < len(n); i++ {
				c := lowerByte(n[i])
				if m.class[c] == 0 {
					m.class[c] = int32(m.classes)
					m.classes++
				}
			}
		}
	}
	goTo := [][]int32{make([]int32, m.classes)}
	m.out = [][]acOut{nil}
	for pi, p := range ps {
		for _, n := range p.needles {
			s := int32(0)
			for i := 0; i < len(n); i++ {
				c := m.class[lowerByte(n[i])]
				if goTo[s][c] == 0 {
					goTo = append(goTo, make([]int32, m.classes))
					m.out = append(m.out, nil)
					goTo[s][c] = int32(len(goTo) - 1)
				}
				s = goTo[s][c]
			}
			m.out[s] = append(m.out[s], acOut{int32(pi), int32(len(n))})
		}
	}
	m.build(goTo)
	m.premultiply()
	for c := 'A'; c <= 'Z'; c++ { // match ASCII case-insensitively without a lowercase copy
		m.class[c] = m.class[c+'a'-'A']
	}
	return m
}

// premultiply stores next states as row offsets so the scan loop does one
// load and one add per byte.
func (m *matcher) premultiply() {
	for i, t := range m.next {
		m.next[i] = t * int32(m.classes)
		if len(m.out[t]) > 0 {
			m.next[i] = -m.next[i]
		}
	}
}

// build turns the trie into a DFA with breadth-first failure links.
func (m *matcher) build(goTo [][]int32) {
	fail := make([]int32, len(goTo))
	m.next = make([]int32, len(goTo)*m.classes)
	queue := []int32{}
	for c := 0; c < m.classes; c++ {
		if s := goTo[0][c]; s != 0 {
			queue = append(queue, s)
		}
		m.next[c] = goTo[0][c]
	}
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		m.out[r] = append(m.out[r], m.out[fail[r]]...)
		for c := 0; c < m.classes; c++ {
			s := goTo[r][c]
			if s == 0 {
				m.next[int(r)*m.classes+c] = m.next[int(fail[r])*m.classes+c]
				continue
			}
			fail[s] = m.next[int(fail[r])*m.classes+c]
			if fail[s] == s {
				fail[s] = 0
			}
			m.next[int(r)*m.classes+c] = s
			queue = append(queue, s)
		}
	}
}

func lowerByte(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// maxNeedleHits caps the positions kept per request; past it, patterns
// that have not matched yet are not looked for any further.
const maxNeedleHits = 2048

// scan returns (pattern<<32 | start offset) for every needle occurrence,
// sorted by pattern then offset.
func (m *matcher) scan(text string, out []uint64) []uint64 {
	s := int32(0)
	next, class := m.next, &m.class
	for i := 0; i < len(text); i++ {
		s = next[s+class[text[i]]]
		if s < 0 {
			s = -s
			for _, h := range m.out[int(s)/m.classes] {
				if len(out) < maxNeedleHits {
					out = append(out, uint64(h.pat)<<32|uint64(i+1-int(h.n)))
				}
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}
