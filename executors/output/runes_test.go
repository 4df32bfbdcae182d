package output

import "testing"

func TestTrimRune(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"abc", "abc"},
		{"ab\xc3", "ab"},         // first byte of é
		{"ab\xe2\x9c", "ab"},     // two bytes of ✓
		{"ab✓", "ab✓"},           // complete
		{"ab\xf0\x9f\x8e", "ab"}, // three bytes of 🎉
		{"ab🎉", "ab🎉"},           // four bytes, complete
		{"\xff\xfe", "\xff\xfe"}, // binary stays binary
		{"\x80\x80\x80\x80", "\x80\x80\x80\x80"},
		{"", ""},
	} {
		if got := string(TrimRune([]byte(tc.in))); got != tc.want {
			t.Errorf("TrimRune(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestHeadAndTail(t *testing.T) {
	for _, tc := range []struct {
		in         string
		n          int
		head, tail string
		cut        bool
	}{
		{"hello", 10, "hello", "hello", false},
		{"hello", 5, "hello", "hello", false},
		{"hello", 3, "hel", "llo", true},
		{"é✓🎉", 9, "é✓🎉", "é✓🎉", false},
		{"é✓🎉", 8, "é✓", "✓🎉", true}, // the cut splits 🎉 / é
		{"é✓🎉", 4, "é", "🎉", true},   // the cut splits ✓
		{"é✓🎉", 1, "", "", true},     // nothing whole fits
		{"abc", 0, "", "", true},
		{"", 0, "", "", false},
		{"a\x80\x80\x80\x80b", 5, "a\x80\x80\x80\x80", "\x80b", true}, // binary: at most 3 bytes dropped
	} {
		head, cut := Head([]byte(tc.in), tc.n)
		if string(head) != tc.head || cut != tc.cut {
			t.Errorf("Head(%q, %d) = %q %v, want %q %v", tc.in, tc.n, head, cut, tc.head, tc.cut)
		}
		if tail := Tail([]byte(tc.in), tc.n); string(tail) != tc.tail {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.in, tc.n, tail, tc.tail)
		}
	}
}
