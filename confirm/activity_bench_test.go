package confirm

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkActivityRunFinished is what a run pays for its excerpt: a
// 1 MiB stdout and a short stderr, cut and redacted, into the ring.
func BenchmarkActivityRunFinished(b *testing.B) {
	a := NewActivity()
	out := strings.Repeat("line of output with token=abcdefgh1234 in it\n", 1<<20/45)
	for b.Loop() {
		a.RunFinished("t", "s", "req", out, "warning: something\n", false)
	}
}

// BenchmarkDiff is what a file write pays for its diff: a 64 KiB text
// file with one line edited (the common case), and with every line
// changed (the worst case the bounds allow).
func BenchmarkDiff(b *testing.B) {
	var before, one, all strings.Builder
	for i := 0; before.Len() < MaxDiffInput-64; i++ {
		fmt.Fprintf(&before, "line %d of the file\n", i)
		if i == 500 {
			fmt.Fprintf(&one, "line %d of the file, edited\n", i)
		} else {
			fmt.Fprintf(&one, "line %d of the file\n", i)
		}
		fmt.Fprintf(&all, "LINE %d OF THE FILE\n", i)
	}
	for _, tc := range []struct{ name, after string }{{"one-line", one.String()}, {"every-line", all.String()}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if d := Diff("f.txt", []byte(before.String()), []byte(tc.after), true); d.Text == "" {
					b.Fatal("no diff")
				}
			}
		})
	}
}
