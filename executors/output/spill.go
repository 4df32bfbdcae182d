package output

import (
	"bytes"
	"io"
	"os"
	"path"

	"github.com/sandgate/sandgate/executors/internal/wsfile"
)

// SpillPaths returns where the spill file of request id goes: relative to
// the workspace, and as the code (and the client, in Result.OutputPath)
// sees it. The id must already be valid (executors.Prologue checks it).
func SpillPaths(id string) (rel, shown string) {
	rel = path.Join(wsfile.OutputsDir, id+".log")
	return rel, path.Join(wsfile.Mount, rel)
}

// CreateIn creates the file rel inside the workspace dir for Spill.Open.
// The workspace belongs to the sandboxed code, so every step goes through
// an os.Root and an existing entry (a planted symlink or hard link) is
// replaced, never written through (wsfile.CreateExclusive).
func CreateIn(dir, rel string) (io.WriteCloser, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := wsfile.CreateExclusive(root, rel)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Spill is the full-output copy of one run (stdout and stderr interleaved
// in arrival order, as 2>&1 would), for when the response had to be
// truncated. Until Activate (the first overflow of a stream's cap) it only
// journals in memory, which the response caps bound; from then on it
// writes through to the file Open creates, up to Limit bytes, and silently
// drops the rest, so the run is never blocked on a full pipe. A failed
// write is reported once to OnError and ends the copy: Close then says the
// file is not usable. It is not safe for concurrent use (a Collector's
// lock covers it).
type Spill struct {
	// Limit caps the file, in bytes.
	Limit int
	// Open creates the file; nil means there is never a file.
	Open func() (io.WriteCloser, error)
	// OnError, when set, is told why the copy ended early.
	OnError func(error)

	journal [][]byte
	w       io.WriteCloser
	written int
	failed  bool
}

// Record adds p, in memory or to the file.
func (s *Spill) Record(p []byte) {
	switch {
	case s.failed || s.Open == nil:
	case s.w == nil:
		s.journal = append(s.journal, bytes.Clone(p))
	default:
		s.write(p)
	}
}

// Activate opens the file and writes the journal to it.
func (s *Spill) Activate() {
	if s.w != nil || s.failed || s.Open == nil {
		return
	}
	w, err := s.Open()
	if err != nil {
		s.fail(err)
		return
	}
	s.w = w
	for _, chunk := range s.journal {
		s.write(chunk)
	}
	s.journal = nil
}

func (s *Spill) write(p []byte) {
	p = p[:min(len(p), max(s.Limit-s.written, 0))]
	if len(p) == 0 || s.failed {
		return
	}
	n, err := s.w.Write(p)
	s.written += n
	if err != nil {
		s.fail(err)
	}
}

func (s *Spill) fail(err error) {
	s.failed, s.journal = true, nil
	if s.OnError != nil {
		s.OnError(err)
	}
}

// Close closes the file and reports whether it holds the output, complete
// up to Limit.
func (s *Spill) Close() bool {
	s.journal = nil
	if s.w == nil {
		return false
	}
	if err := s.w.Close(); err != nil && !s.failed {
		s.fail(err)
	}
	return !s.failed
}
