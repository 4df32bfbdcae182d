package manager

import "strings"

// Printable keeps at most n runes of s, without control characters, and
// marks a cut with "…": what a front end may show of a client's own
// strings (its name and version, a path it sent) in an answer, a log
// line or the approval page.
func Printable(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if n == 0 {
			b.WriteString("…")
			break
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			continue
		}
		b.WriteRune(r)
		n--
	}
	return b.String()
}

// clientMax bounds the client a session's record names.
const clientMax = 128
