package risk

import "sort"

// matcher finds every needle of a language's raw patterns in one pass over
// the text, ignoring ASCII case (an Aho-Corasick automaton compiled to a DFA over byte
// classes). Running strings.Index once per needle would scan the text about
// a hundred times per request; this scans it once.
type matcher struct {
	class   [256]uint8 // byte -> class; 0 is "no needle uses this byte"
	classes int
	next    []int32 // state*classes + class -> next state*classes (pre-multiplied)
	hasOut  []bool  // indexed by state*classes
	out     [][]acOut
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
					m.class[c] = uint8(m.classes)
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
	m.hasOut = make([]bool, len(m.next))
	for s := 0; s*m.classes < len(m.next); s++ {
		m.hasOut[s*m.classes] = len(m.out[s]) > 0
		for c := 0; c < m.classes; c++ {
			m.next[s*m.classes+c] *= int32(m.classes)
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
	next, hasOut, class := m.next, m.hasOut, &m.class
	for i := 0; i < len(text); i++ {
		s = next[s+int32(class[text[i]])]
		if hasOut[s] {
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
