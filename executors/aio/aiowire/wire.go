// Package aiowire holds the wire types that both ends of the aio sandbox
// API share: sandboxd (cmd/sandboxd, the server in the aio image) and the
// gateway's aio client. They are the x_sandgate extension sandboxd adds to
// the AIO API and the results that carry it; types only one end needs stay
// with it (the server's requests keep pointers to tell a missing field
// from a zero one).
package aiowire

import "encoding/json"

// RunExtension is sandboxd's optional addition to /v1/bash/exec and
// /v1/code/execute requests. The real AIO server ignores unknown fields,
// so a client may always send it and must cope with a response that has
// no x_sandgate part.
type RunExtension struct {
	// OutputLimit is the number of bytes kept per stream for the response.
	OutputLimit int `json:"output_limit,omitempty"`
	// SpillPath, when set, receives the combined output (up to SpillLimit
	// bytes) if a stream overflowed OutputLimit.
	SpillPath  string `json:"spill_path,omitempty"`
	SpillLimit int    `json:"spill_limit,omitempty"`
	// TimeoutMS is the hard timeout in milliseconds, more precise than the
	// AIO fields' seconds; it wins over them.
	TimeoutMS int64      `json:"timeout_ms,omitempty"`
	Limits    *RunLimits `json:"limits,omitempty"`
	// Stream asks for the output while the run goes on: a synchronous
	// call then answers 200 with StreamMediaType, one StreamEvent per
	// line, instead of the JSON envelope. Errors found before the run
	// starts are still ordinary JSON answers, so a client tells the two
	// apart by the Content-Type. A server that does not know the field
	// answers with the envelope: a client must accept either.
	Stream bool `json:"stream,omitempty"`
	// Program, when set, is the run's request id: the code (or command)
	// is written to executors.ProgramPath(Program, language) and run as
	// that file, with the interpreter flags every backend uses (python3
	// -I -u, bash --noprofile --norc), so the program sees the same argv,
	// __file__ and sys.path as under any other executor (DESIGN.md §6).
	// Plain AIO clients leave it empty and get the AIO API's behaviour.
	Program string `json:"program,omitempty"`
	// Egress, when set, grants the run network through the gateway's
	// egress proxy: sandboxd gives it the proxy variables
	// (executors.EgressEnv), and the CA variables when CA is set (the
	// gateway wrote the bundle into the egress directory). sandboxd's
	// own relay on 127.0.0.1:3128 carries the connections.
	Egress *RunEgress `json:"egress,omitempty"`
}

// RunEgress is a run's network grant (RunExtension.Egress).
type RunEgress struct {
	CA bool `json:"ca,omitempty"`
}

// HoldHeader, sent with value "1" on /v1/bash/exec or /v1/code/execute,
// asks for a held run: the request body is the JSON object followed, once
// the caller lets the run go, by Release and the body's end. sandboxd reads
// the object, stages the run as far as it can without running any of it
// (its program file written, the interpreter loaded and stopped at its exec
// with its limits set), and starts it only when Release arrives. A body
// that ends or fails before Release discards the run, which never started.
//
// A server that does not know the header reads the whole body before it
// parses it, so it too starts nothing before Release, and takes the
// trailing newline for the whitespace JSON allows: a held call is safe with
// any server.
const HoldHeader = "X-Sandgate-Hold"

// Release is the byte that lets a held run go (HoldHeader).
const Release = '\n'

// StreamMediaType is the Content-Type of a streamed answer.
const StreamMediaType = "application/x-ndjson"

// StreamEvent is one line of a streamed answer: a chunk of output (Seq,
// Stream, Data), as the server's output collector kept it (within
// output_limit, in arrival order across both streams, numbered 1, 2, …
// across both; a reader that falls behind gets fewer, larger chunks),
// or, on the last
// line, Result: the envelope the call answers without streaming, whose
// x_sandgate part stays the authoritative output. An answer that ends
// without a Result line is a run whose outcome is unknown.
type StreamEvent struct {
	Seq uint64 `json:"seq,omitempty"`
	// Stream is "stdout" or "stderr".
	Stream string `json:"stream,omitempty"`
	// Data are the chunk's exact bytes (base64 in JSON).
	Data   []byte          `json:"data,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// RunLimits are the rlimits of one run, applied before the interpreter
// starts. Zero fields are not set.
type RunLimits struct {
	CPUSeconds    int `json:"cpu_seconds,omitempty"`
	MaxOpenFiles  int `json:"max_open_files,omitempty"`
	MaxFileSizeMB int `json:"max_file_size_mb,omitempty"`
	// MemoryMB caps the address space of each of the run's processes
	// (RLIMIT_AS), as the subprocess executor does; for node the V8 heap
	// is capped at it and the address space gets V8's headroom.
	MemoryMB int `json:"memory_mb,omitempty"`
	// MaxProcs is the run's process budget (threads count too): processes
	// the run may have besides sandboxd's own and the sandbox's other
	// long-lived ones. Concurrent runs of the sandbox share it.
	MaxProcs int `json:"max_procs,omitempty"`
}

// RunOutput is the x_sandgate part of a response: the exact bytes of both
// streams (JSON strings cannot carry invalid UTF-8) and the spill file.
type RunOutput struct {
	StdoutB64 string `json:"stdout_b64"`
	StderrB64 string `json:"stderr_b64"`
	// Truncated is set when either stream overflowed output_limit;
	// StdoutTruncated and StderrTruncated say which.
	Truncated       bool    `json:"truncated"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	SpillPath       *string `json:"spill_path"`
	DurationMS      int64   `json:"duration_ms"`
	// KernelRestarted and ResultsDropped are a stateful run's
	// (executors.Result's fields of the same names).
	KernelRestarted bool `json:"kernel_restarted,omitempty"`
	ResultsDropped  bool `json:"results_dropped,omitempty"`
}

// BashExecResult is the data of POST /v1/bash/exec. XSandgate is left out
// when absent, as the real server never sends it.
type BashExecResult struct {
	SessionID    string     `json:"session_id"`
	CommandID    string     `json:"command_id"`
	Command      string     `json:"command"`
	Status       string     `json:"status"`
	Stdout       *string    `json:"stdout"`
	Stderr       *string    `json:"stderr"`
	ExitCode     *int       `json:"exit_code"`
	Offset       int        `json:"offset"`
	StderrOffset int        `json:"stderr_offset"`
	XSandgate    *RunOutput `json:"x_sandgate,omitempty"`
}

// Fingerprint is the data of GET /v1/workspace/fingerprint: a hash of
// the workspace tree (see cmd/sandboxd), and how many entries it covers.
type Fingerprint struct {
	Fingerprint string `json:"fingerprint"`
	Entries     int    `json:"entries"`
}

// EmptyFingerprint is the Fingerprint of an empty workspace: the SHA-256
// of no input, in hex.
const EmptyFingerprint = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
