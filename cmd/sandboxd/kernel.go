package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/executors/kernel"
)

// Stateful code (POST /v1/code/execute with stateful, the AIO API's
// Jupyter-backed mode; DESIGN.md §11): sandboxd holds one kernel driver
// per Jupyter session id (executors/kernel's driver.py, the same one the
// docker executor runs) as a long-lived process tree of the sandbox's
// uid, and speaks JSON lines to it. The driver's rlimits are the first
// cell's (RLIMIT_AS on each process of the kernel, a RLIMIT_NPROC budget
// over the baseline) and hold for the kernel's whole life; the
// container's cgroup stays the hard bound. DELETE /v1/jupyter/sessions/{id}
// kills one.

// kernelStart bounds a driver's start (Python, ipykernel, first answer).
const kernelStart = 2 * time.Minute

// maxKernels bounds the kernels one sandbox holds (the AIO server's
// max_sessions is of the same order); the gateway uses one.
const maxKernels = 4

var kernelIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// kproc is one driver and its kernel.
type kproc struct {
	conn *kernel.Conn
	root treeRoot
	done chan struct{} // closed when the driver exited
	stop func()        // unregisters the tree
}

func (k *kproc) alive() bool {
	select {
	case <-k.done:
		return false
	default:
		return k.conn.Alive()
	}
}

type kernelTable struct {
	s   *server
	mu  sync.Mutex
	m   map[string]*kproc
	had map[string]bool
}

func newKernelTable(s *server) *kernelTable {
	return &kernelTable{s: s, m: map[string]*kproc{}, had: map[string]bool{}}
}

// get returns session's kernel, starting one when it has none alive;
// restarted reports that one it had before is gone.
func (t *kernelTable) get(ctx context.Context, id string, lim *runLimits) (*kproc, bool, error) {
	t.mu.Lock()
	k := t.m[id]
	if k != nil && k.alive() {
		t.mu.Unlock()
		return k, false, nil
	}
	had := t.had[id] || k != nil
	if k != nil {
		delete(t.m, id)
		t.s.jobs.sweepTree(k.root).kill(2 * time.Second)
	}
	if len(t.m) >= maxKernels {
		t.mu.Unlock()
		return nil, false, errTooManyKernels
	}
	// Started under the lock: two first cells of one session must not
	// start two kernels, and a start is rare.
	defer t.mu.Unlock()
	nk, err := t.start(ctx, lim)
	if err != nil {
		return nil, false, err
	}
	t.m[id], t.had[id] = nk, true
	return nk, had, nil
}

var errTooManyKernels = errors.New("too many kernels in this sandbox")

func (t *kernelTable) start(ctx context.Context, lim *runLimits) (*kproc, error) {
	argv := kernel.Command()
	if lim != nil {
		a := resolveLimits(*lim, 0, func() int {
			t.s.jobs.mu.Lock()
			defer t.s.jobs.mu.Unlock()
			return t.s.jobs.baselineLocked()
		})
		argv = append([]string{"/bin/sh", "-c", ulimitScript(a), "sh"}, argv...)
	}
	id := "kernel-" + newID()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = t.s.cfg.Workspace
	cmd.Env = t.s.jobs.env(nil, cmd.Dir, id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll([]*os.File{inR, inW}, nil)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	root, stop, err := t.s.jobs.startTree(cmd, id)
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		_ = inW.Close()
		_ = outR.Close()
		return nil, fmt.Errorf("start kernel driver: %w", err)
	}
	k := &kproc{conn: kernel.New(inW, outR), root: root, done: make(chan struct{}), stop: stop}
	go func() {
		_ = cmd.Wait()
		_ = inW.Close()
		k.stop()
		close(k.done)
	}()
	sctx, cancel := context.WithTimeout(ctx, kernelStart)
	defer cancel()
	if err := k.conn.Ready(sctx); err != nil {
		t.kill(k)
		return nil, fmt.Errorf("kernel start: %w", err)
	}
	return k, nil
}

// kill ends k's driver and kernel (the kernel runs in a session of its
// own; the run marker reaches it).
func (t *kernelTable) kill(k *kproc) {
	k.conn.Close()
	t.s.jobs.sweepTree(k.root).kill(2 * time.Second)
}

// drop kills and forgets session id's kernel, if k is still it.
func (t *kernelTable) drop(id string, k *kproc) {
	t.mu.Lock()
	if t.m[id] == k {
		delete(t.m, id)
	}
	t.mu.Unlock()
	t.kill(k)
}

func (t *kernelTable) closeAll() {
	t.mu.Lock()
	ks := t.m
	t.m = map[string]*kproc{}
	t.mu.Unlock()
	for _, k := range ks {
		t.kill(k)
	}
}

// handleStateful is /v1/code/execute with stateful: the code runs as a
// cell of the session id's kernel.
func (s *server) handleStateful(w http.ResponseWriter, r *http.Request, req codeExecReq, timeout time.Duration) {
	if *req.Language != "python" {
		writeFail(w, http.StatusBadRequest, "stateful execution is python only", nil)
		return
	}
	sid := "default"
	if req.SessionID != nil && *req.SessionID != "" {
		sid = *req.SessionID
	}
	if !kernelIDPattern.MatchString(sid) {
		writeFail(w, http.StatusBadRequest, "Invalid session_id", nil)
		return
	}
	var spec jobSpec
	applyExtension(&spec, req.XSandgate)
	if spec.hardTimeout > 0 {
		timeout = spec.hardTimeout
	}
	began := time.Now()
	k, restarted, err := s.kernels.get(r.Context(), sid, spec.limits)
	if err != nil {
		s.cfg.Log.Warn("kernel", "err", err.Error())
		writeFail(w, http.StatusInternalServerError, "Failed to start the kernel", nil)
		return
	}
	release, err := k.conn.Acquire(r.Context())
	if err != nil {
		writeFail(w, http.StatusServiceUnavailable, "the request ended while waiting for the kernel", nil)
		return
	}
	defer release()
	retain := spec.retain
	if retain <= 0 {
		retain = s.cfg.RetainBytes
	}
	out := newOutput(retain, spec.spill, s.cfg.Workspace, nil)
	oc, err := k.conn.Run(r.Context(), kernel.Cell{Code: *req.Code, Timeout: timeout}, out.Stdout(), out.Stderr())
	if errors.Is(err, kernel.ErrGone) || errors.Is(err, kernel.ErrStuck) {
		s.kernels.drop(sid, k)
		_, _ = out.Stderr().Write([]byte("sandboxd: the kernel's driver ended; the next call starts a new kernel\n"))
		oc = kernel.Outcome{ExitCode: 137, Died: true, TimedOut: errors.Is(err, kernel.ErrStuck)}
	}
	o := out.Finish()
	res := statefulResult(req, sid, oc, o.Stdout, o.Stderr)
	if req.XSandgate != nil {
		outb, outTrunc := out.Bytes(stdout)
		errb, errTrunc := out.Bytes(stderr)
		ro := &runOutput{StdoutB64: base64.StdEncoding.EncodeToString(outb), StderrB64: base64.StdEncoding.EncodeToString(errb),
			Truncated: o.Truncated, StdoutTruncated: outTrunc, StderrTruncated: errTrunc,
			DurationMS: time.Since(began).Milliseconds(), KernelRestarted: restarted || oc.Restarted, ResultsDropped: oc.Dropped}
		if o.SpillPath != "" {
			ro.SpillPath = ptr(o.SpillPath)
		}
		res.XSandgate = ro
	}
	writeOK(w, res)
}

// statefulResult is the AIO answer of a cell: status, the streams and
// each display output as Jupyter outputs.
func statefulResult(req codeExecReq, sid string, oc kernel.Outcome, stdoutText, stderrText string) codeResult {
	res := codeResult{Language: "python", Code: *req.Code, Stdout: ptr(stdoutText), Stderr: ptr(stderrText),
		ExitCode: ptr(oc.ExitCode), Outputs: []codeOutput{}, SessionID: ptr(sid)}
	switch {
	case oc.TimedOut:
		res.Status = "timeout"
	case oc.ExitCode == 0:
		res.Status = "ok"
	default:
		res.Status = "error"
	}
	if stdoutText != "" {
		res.Outputs = append(res.Outputs, codeOutput{OutputType: "stream", Name: ptr("stdout"), Text: ptr(stdoutText)})
	}
	if stderrText != "" {
		res.Outputs = append(res.Outputs, codeOutput{OutputType: "stream", Name: ptr("stderr"), Text: ptr(stderrText)})
	}
	for _, b := range oc.Results {
		res.Outputs = append(res.Outputs, codeOutput{OutputType: "display_data", Data: map[string]json.RawMessage(b)})
	}
	return res
}

// handleJupyterSessionDelete is DELETE /v1/jupyter/sessions/{id}: the
// kernel is killed, and the next stateful call of that id starts a new
// one (not reported as a restart: the caller asked for it).
func (s *server) handleJupyterSessionDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.kernels.mu.Lock()
	k := s.kernels.m[id]
	s.kernels.mu.Unlock()
	if k == nil {
		writeFail(w, http.StatusNotFound, "Session not found", nil)
		return
	}
	s.kernels.drop(id, k)
	s.kernels.mu.Lock()
	delete(s.kernels.had, id)
	s.kernels.mu.Unlock()
	writeOK(w, map[string]any{"session_id": id})
}
