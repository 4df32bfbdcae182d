package output

import (
	"bytes"
	"path/filepath"
	"slices"
)

// HostPaths returns the spellings of the host directory dir that output
// can show, for Options.Mask: as given (cleaned), and with symlinks
// resolved (what getcwd(2) and the mount table report).
func HostPaths(dir string) []string {
	paths := []string{filepath.Clean(dir)}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != paths[0] {
		paths = append(paths, real)
	}
	return paths
}

// masker replaces host paths in a byte stream that arrives in arbitrary
// pieces (pipe reads do not respect paths). It holds back only a tail that
// could be the start of a path split across two pieces, so the other
// stream's bytes keep their arrival order in the spill file.
type masker struct {
	paths [][]byte // longest first: a longer spelling wins over its prefix
	repl  []byte
	carry []byte // held-back tail
	buf   []byte // reused, so a flood of output allocates nothing per write
}

func newMasker(paths []string, repl string) masker {
	m := masker{repl: []byte(repl)}
	for _, p := range paths {
		if p != "" && p != repl {
			m.paths = append(m.paths, []byte(p))
		}
	}
	slices.SortFunc(m.paths, func(a, b []byte) int { return len(b) - len(a) })
	return m
}

// feed masks p and passes on, through emit, everything that can no longer
// be part of a match.
func (m *masker) feed(p []byte, emit func([]byte)) {
	if len(m.paths) == 0 {
		emit(p)
		return
	}
	m.buf = append(append(m.buf[:0], m.carry...), p...)
	rest := m.buf
	for {
		at, n := m.next(rest)
		if at < 0 {
			break
		}
		emitNonEmpty(emit, rest[:at])
		if m.longerMayFollow(rest[at:], n) {
			// A longer spelling may still complete here: decide when more
			// bytes have arrived.
			m.carry = append(m.carry[:0], rest[at:]...)
			return
		}
		emit(m.repl)
		rest = rest[at+n:]
	}
	hold := m.partialTail(rest)
	emitNonEmpty(emit, rest[:len(rest)-hold])
	m.carry = append(m.carry[:0], rest[len(rest)-hold:]...)
}

// flush passes on what was held back at the end of the stream, masking
// what is a whole path.
func (m *masker) flush(emit func([]byte)) {
	rest := m.carry
	m.carry = nil
	for {
		at, n := m.next(rest)
		if at < 0 {
			break
		}
		emitNonEmpty(emit, rest[:at])
		emit(m.repl)
		rest = rest[at+n:]
	}
	emitNonEmpty(emit, rest)
}

// next finds the earliest path in b and its length (the longest one that
// starts there).
func (m *masker) next(b []byte) (at, n int) {
	at = -1
	for _, p := range m.paths {
		if i := bytes.Index(b, p); i >= 0 && (at < 0 || i < at) {
			at, n = i, len(p)
		}
	}
	return at, n
}

// longerMayFollow reports whether b, which starts with a match of length
// n, is a proper prefix of a longer path.
func (m *masker) longerMayFollow(b []byte, n int) bool {
	for _, p := range m.paths {
		if len(p) > n && len(b) < len(p) && bytes.HasPrefix(p, b) {
			return true
		}
	}
	return false
}

// partialTail is the length of the longest suffix of b that is a proper
// prefix of a path.
func (m *masker) partialTail(b []byte) int {
	for i := max(0, len(b)-len(m.paths[0])+1); i < len(b); i++ {
		for _, p := range m.paths {
			if len(b)-i < len(p) && bytes.HasPrefix(p, b[i:]) {
				return len(b) - i
			}
		}
	}
	return 0
}

func emitNonEmpty(emit func([]byte), b []byte) {
	if len(b) > 0 {
		emit(b)
	}
}
