package output

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
)

// TestCopy: Copy moves every byte of a stream larger than its buffer,
// from a reader and from a pipe (an *os.File, whose WriteTo it
// bypasses), and returns the reader's error.
func TestCopy(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 10000) // 160 kB, five buffers
	boom := errors.New("boom")
	tests := []struct {
		name    string
		src     func(t *testing.T) io.Reader
		want    string
		wantErr error
	}{
		{"reader", func(*testing.T) io.Reader { return strings.NewReader(big) }, big, nil},
		{"one byte at a time", func(*testing.T) io.Reader { return iotest.OneByteReader(strings.NewReader("abc")) }, "abc", nil},
		{"pipe", func(t *testing.T) io.Reader {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			go func() { _, _ = io.WriteString(w, big); w.Close() }()
			return r
		}, big, nil},
		{"error", func(*testing.T) io.Reader {
			return io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(boom))
		}, "ab", boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dst bytes.Buffer
			n, err := Copy(&dst, tt.src(t))
			if !errors.Is(err, tt.wantErr) || dst.String() != tt.want || n != int64(len(tt.want)) {
				t.Errorf("copied %d bytes (%d kept), err %v; want %d, err %v", n, dst.Len(), err, len(tt.want), tt.wantErr)
			}
		})
	}
}
