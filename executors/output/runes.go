package output

import "unicode/utf8"

// TrimRune drops an incomplete UTF-8 sequence at the end of b: the one a
// byte cap creates when it falls inside a multi-byte character. Only the
// last UTFMax bytes are looked at, so binary output stays binary and a
// complete character is never dropped.
func TrimRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// Head returns at most n bytes from the start of b, never ending inside a
// UTF-8 sequence the cut split, and whether it cut anything. A
// non-positive n keeps nothing of a non-empty b.
func Head(b []byte, n int) ([]byte, bool) {
	if len(b) <= n {
		return b, false
	}
	return TrimRune(b[:max(n, 0)]), true
}

// Tail returns at most n bytes from the end of b, never starting inside a
// UTF-8 sequence the cut split (at most UTFMax-1 continuation bytes are
// dropped: more cannot come from the cut).
func Tail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[len(b)-max(n, 0):]
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	return b
}
