package subprocess

import (
	"io"
	"os"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/wsfile"
	runout "github.com/sandgate/sandgate/executors/output"
)

// output is the output.Collector of one run, under the names the three
// launch paths (cold, warm, zygote) use.
type output struct{ *runout.Collector }

// newOutput wires masking, the cap and the spill file for one run.
func (e *Executor) newOutput(ws *os.Root, spec executors.Spec) *output {
	rel, shown := runout.SpillPaths(spec.RequestID)
	id := spec.RequestID
	return &output{runout.New(runout.Options{
		Limit: spec.Limits.MaxOutputBytes,
		// The code sees /workspace, but the mount table
		// (/proc/self/mountinfo) still names the host directory.
		Mask:      runout.HostPaths(spec.WorkspaceDir),
		SpillPath: shown,
		Tap:       spec.Output,
		Spill: runout.Spill{
			Limit: spec.Limits.MaxSpillBytes,
			Open:  func() (io.WriteCloser, error) { return wsfile.CreateExclusive(ws, rel) },
			OnError: func(err error) {
				e.log.Warn("spill file", "request_id", id, "err", err.Error())
			},
		},
	})}
}

// write is Stdout().Write or Stderr().Write.
func (o *output) write(stderr bool, p []byte) {
	s := runout.Stdout
	if stderr {
		s = runout.Stderr
	}
	o.Write(s, p)
}

// finish ends the output once (later calls repeat the answer) and returns
// the response texts, whether either was truncated and, when the spill
// file holds the full output, its path as the code sees it.
func (o *output) finish() (stdout, stderr string, truncated bool, spillPath string) {
	r := o.Finish()
	return r.Stdout, r.Stderr, r.Truncated, r.SpillPath
}
