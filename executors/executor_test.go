package executors

import (
	"errors"
	"testing"
)

func TestLimitsOr(t *testing.T) {
	def := Limits{MemoryMB: 512, CPUSeconds: 30, MaxProcs: 128, MaxOpenFiles: 256, MaxFileSizeMB: 100, MaxOutputBytes: 1 << 20, MaxSpillBytes: 16 << 20}
	cases := []struct {
		name string
		in   Limits
		want Limits
	}{
		{"zero takes every default", Limits{}, def},
		{"set fields win", Limits{MemoryMB: 64, MaxProcs: 8}, Limits{MemoryMB: 64, CPUSeconds: 30, MaxProcs: 8, MaxOpenFiles: 256, MaxFileSizeMB: 100, MaxOutputBytes: 1 << 20, MaxSpillBytes: 16 << 20}},
		{"negative is not unlimited", Limits{MemoryMB: -1, CPUSeconds: -5}, def},
	}
	for _, c := range cases {
		if got := c.in.Or(def); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestUnavailableErrorIs(t *testing.T) {
	err := error(&UnavailableError{Kind: KindDocker, Reason: "engine down", Err: errors.New("dial")})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatal("UnavailableError does not match ErrUnavailable")
	}
}
