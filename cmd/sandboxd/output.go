package main

import (
	"io"
	"path/filepath"
	"strings"

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

// pump copies r into the stream until EOF or error.
func pump(r io.Reader, w io.Writer) {
	buf := make([]byte, 64<<10)
	_, _ = io.CopyBuffer(w, r, buf)
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
