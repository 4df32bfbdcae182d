package procfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Stat
		gone bool
		err  error
	}{
		{file: "plain.stat", want: Stat{PID: 8933, Comm: "cat", State: 'R', PPID: 8929, PGID: 8929, SID: 19639, Threads: 1, Start: 5634719}},
		{file: "comm-with-parens.stat", want: Stat{PID: 4242, Comm: "a) b (c", State: 'S', PPID: 1, PGID: 4242, SID: 4242, Threads: 7, Start: 99}},
		{file: "zombie.stat", want: Stat{PID: 77, Comm: "python3", State: 'Z', PPID: 76, PGID: 70, SID: 70, Threads: 1, Start: 123456}, gone: true},
		{file: "truncated.stat", err: ErrMalformed},
		{file: "bad-pid.stat", err: ErrMalformed},
		{file: "bad-ppid.stat", err: ErrMalformed},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseStat(b)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if got != tc.want || got.Gone() != tc.gone {
				t.Errorf("got %+v (gone %v), want %+v (gone %v)", got, got.Gone(), tc.want, tc.gone)
			}
		})
	}
}

// TestReadStatOfThisProcess reads a live process, and a pid that exists
// nowhere.
func TestReadStatOfThisProcess(t *testing.T) {
	s, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.PID != os.Getpid() || s.PPID != os.Getppid() || s.State == 0 || s.Start == 0 || s.Threads < 1 {
		t.Errorf("this process's stat: %+v", s)
	}
	if _, err := ReadStat(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a pid above pid_max: %v, want ErrNotExist", err)
	}
}
