// Package procfs reads what sandgate needs of /proc/<pid>/stat: the
// gateway's reapers and owner checks, sandboxd's kill sweep, the browser
// router's liveness check and the benchmarks' process counts. One parser,
// because the format has one trap every copy had to get right: the
// command name may hold spaces and parentheses, so the fields are counted
// from the last ')'.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrMalformed is a stat file that does not have the fields proc(5)
// documents.
var ErrMalformed = errors.New("procfs: malformed stat")

// Stat is the part of /proc/<pid>/stat sandgate reads (proc(5) field
// numbers in the comments).
type Stat struct {
	PID     int    // 1
	Comm    string // 2, without the parentheses
	State   byte   // 3: R, S, D, Z, X, ...
	PPID    int    // 4
	PGID    int    // 5
	SID     int    // 6
	Threads int    // 20
	// Start is the start time in clock ticks since boot (22): with PID,
	// it names one process across pid reuse.
	Start uint64
}

// Gone reports a process that has exited: a zombie or a dead task.
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// ReadStat reads /proc/<pid>/stat. A process that is gone gives the
// open's error (fs.ErrNotExist, or ESRCH when it exits mid-read).
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ParseStat parses the text of a stat file.
func ParseStat(b []byte) (Stat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return Stat{}, fmt.Errorf("%w: no command name", ErrMalformed)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("%w: pid: %w", ErrMalformed, err)
	}
	// f[0] is field 3; field n is f[n-3].
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("%w: %d fields after the command name", ErrMalformed, len(f))
	}
	s := Stat{PID: pid, Comm: string(b[open+1 : end]), State: f[0][0]}
	ints := []struct {
		dst   *int
		field int
	}{{&s.PPID, 4}, {&s.PGID, 5}, {&s.SID, 6}, {&s.Threads, 20}}
	for _, n := range ints {
		if *n.dst, err = strconv.Atoi(f[n.field-3]); err != nil {
			return Stat{}, fmt.Errorf("%w: field %d: %w", ErrMalformed, n.field, err)
		}
	}
	if s.Start, err = strconv.ParseUint(f[22-3], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("%w: field 22: %w", ErrMalformed, err)
	}
	return s, nil
}
