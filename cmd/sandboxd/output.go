package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/executors/output"
)

// Stream indexes, as executors/output numbers them.
const (
	stdout = output.Stdout
	stderr = output.Stderr
)

// spillSpec asks for the combined output (stdout and stderr interleaved in
// arrival order, as 2>&1 would) to be kept in a file when a stream
// overflows its retain limit: the gateway's spill file.
type spillSpec struct {
	path  string
	limit int
}

// newOutput is the output.Collector of one command: each stream keeps its
// first retain bytes and, with sp,
// the combined output goes to the spill file once one overflows. Nothing
// is masked: inside the sandbox the workspace is /workspace. tap, when
// set, sees each kept chunk (a streamed answer).
func newOutput(retain int, sp *spillSpec, workspace string, tap func(output.Chunk)) *output.Collector {
	o := output.Options{Limit: retain, Tap: tap}
	if sp != nil {
		if rel, ok := inside(workspace, sp.path); ok {
			o.SpillPath = sp.path
			o.Spill = output.Spill{Limit: sp.limit,
				Open: func() (io.WriteCloser, error) { return output.CreateIn(workspace, rel) }}
		}
	}
	return output.New(o)
}

// inside returns p relative to dir when p is below dir. The spill file is
// created through an os.Root on the workspace (the code owns the
// workspace and may have planted links in the way), so a spill path
// elsewhere is ignored: the gateway always asks for one under
// /workspace/.sandgate/outputs.
func inside(dir, p string) (string, bool) {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// pump copies r into the stream until EOF or error. When the job cuts
// the pipe off (a read deadline: a detached child holds its other end
// open), what is already in the pipe is still read, without waiting for
// more: the program's last output, which a pump short of CPU had not read
// by the cut, is the run's and is not dropped.
func pump(r *os.File, w io.Writer) {
	buf := make([]byte, 64<<10)
	_, err := io.CopyBuffer(w, r, buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		drain(r, w, buf)
	}
}

// drainMax bounds drain's reads: a detached child that keeps writing
// cannot hold the run open.
const drainMax = 16

// drain reads what the pipe r holds now, never waiting for more.
func drain(r *os.File, w io.Writer, buf []byte) {
	rc, err := r.SyscallConn()
	if err != nil || r.SetReadDeadline(time.Time{}) != nil {
		return
	}
	for range drainMax {
		var n int
		var rerr error
		// f returns true: one non-blocking read (the pipe is in
		// non-blocking mode), EAGAIN once it is empty.
		if err := rc.Read(func(fd uintptr) bool { n, rerr = syscall.Read(int(fd), buf); return true }); err != nil || rerr != nil || n <= 0 {
			return
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return
		}
	}
}

// middleTruncate keeps the head and tail of s around a marker when it is
// longer than n bytes (the AIO max_output_length behaviour), never cutting
// a UTF-8 sequence in two; n <= 0 keeps everything.
func middleTruncate(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	const marker = "\n... [output truncated] ...\n"
	keep := max(n-len(marker), 2)
	head, _ := output.Head([]byte(s), keep/2)
	tail := output.Tail([]byte(s), keep/2)
	return string(head) + marker + string(tail)
}
