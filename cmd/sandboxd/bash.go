package main

import (
	"encoding/base64"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio/aiowire"
)

// runExtension, runOutput and bashExecResult are the wire types sandboxd
// shares with the gateway's aio client (see aiowire).
type (
	runExtension   = aiowire.RunExtension
	runOutput      = aiowire.RunOutput
	bashExecResult = aiowire.BashExecResult
)

// bashSession is a /v1/bash session: only API-level state (its default
// working directory) and its current command; every exec is a new process.
type bashSession struct {
	id           string
	workingDir   string
	created      time.Time
	lastUsed     time.Time
	commandCount int
	current      *job
	closed       bool
}

type bashSessions struct {
	s  *server
	mu sync.Mutex
	m  map[string]*bashSession
}

func newBashSessions(s *server) *bashSessions {
	return &bashSessions{s: s, m: make(map[string]*bashSession)}
}

// get returns the session id, creating it (with dir as its working
// directory) when it does not exist.
func (b *bashSessions) get(id, dir string) *bashSession {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id == "" {
		id = newID()
	}
	if sess, ok := b.m[id]; ok {
		return sess
	}
	if dir == "" {
		dir = b.s.cfg.Workspace
	}
	now := time.Now()
	sess := &bashSession{id: id, workingDir: dir, created: now, lastUsed: now}
	b.m[id] = sess
	b.evictLocked()
	return sess
}

func (b *bashSessions) lookup(id string) *bashSession {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[id]
}

// evictLocked closes the least recently used idle sessions beyond the cap.
func (b *bashSessions) evictLocked() {
	for len(b.m) > b.s.cfg.MaxBashSessions {
		var oldest *bashSession
		for _, sess := range b.m {
			if sess.current != nil && !isDone(sess.current) {
				continue
			}
			if oldest == nil || sess.lastUsed.Before(oldest.lastUsed) {
				oldest = sess
			}
		}
		if oldest == nil {
			return
		}
		oldest.closed = true
		delete(b.m, oldest.id)
	}
}

// close removes a session and kills its running command.
func (b *bashSessions) close(id string) bool {
	b.mu.Lock()
	sess, ok := b.m[id]
	var running *job
	if ok {
		delete(b.m, id)
		sess.closed = true
		running = sess.current
	}
	b.mu.Unlock()
	if running != nil {
		b.s.jobs.kill(running, statusKilled)
	}
	return ok
}

func isDone(j *job) bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

type bashExecReq struct {
	Command   *string           `json:"command"`
	SessionID *string           `json:"session_id"`
	ExecDir   *string           `json:"exec_dir"`
	Env       map[string]string `json:"env"`
	// AsyncMode and Timeout (a soft wait that answers "running") are
	// refused: sandboxd's one client, the gateway, runs synchronously
	// and streams (x_sandgate.stream), so it has no /v1/bash/output to
	// collect a detached command's output from.
	AsyncMode       bool          `json:"async_mode"`
	Timeout         *float64      `json:"timeout"`
	HardTimeout     *float64      `json:"hard_timeout"`
	MaxOutputLength *int          `json:"max_output_length"`
	XSandgate       *runExtension `json:"x_sandgate"`
}

// largeCommand is the size above which a command is run from a file: one
// argv string may not exceed 128 KiB on Linux.
const largeCommand = 64 << 10

func (s *server) handleBashExec(w http.ResponseWriter, r *http.Request) {
	var req bashExecReq
	hold, ok := s.decodeHeld(w, r, &req, "command")
	if !ok {
		return
	}
	if req.AsyncMode || (req.Timeout != nil && *req.Timeout > 0) {
		writeFail(w, http.StatusBadRequest, "sandboxd runs commands synchronously: use hard_timeout, not async_mode or timeout", nil)
		return
	}
	if req.ExecDir != nil && *req.ExecDir != "" {
		if err := checkDir(*req.ExecDir); err != nil {
			writeFail(w, http.StatusBadRequest, "Invalid exec_dir: "+err.Error(), nil)
			return
		}
	}
	sid, dir := "", ""
	if req.SessionID != nil {
		sid = *req.SessionID
	}
	if req.ExecDir != nil {
		dir = *req.ExecDir
	}
	sess := s.bash.get(sid, dir)
	s.bash.mu.Lock()
	if sess.current != nil && !isDone(sess.current) {
		s.bash.mu.Unlock()
		writeFail(w, http.StatusBadRequest, "Session "+sess.id+" already has a running command", nil)
		return
	}
	if dir != "" {
		sess.workingDir = dir
	}
	dir = sess.workingDir
	s.bash.mu.Unlock()

	spec := jobSpec{dir: dir, env: req.Env, label: *req.Command}
	cleanup := func() {}
	path, unstage, staged, err := stageProgram(s.cfg.CodeDir, req.XSandgate, executors.LangBash, *req.Command)
	switch {
	case err != nil:
		writeFail(w, http.StatusInternalServerError, "Cannot stage the command: "+err.Error(), nil)
		return
	case staged: // the gateway's run: the program file, as in every backend
		spec.argv, cleanup = programArgv(executors.LangBash, path), unstage
	case len(*req.Command) > largeCommand:
		f, err := os.CreateTemp("", "sandboxd-cmd-*.sh")
		if err != nil {
			writeFail(w, http.StatusInternalServerError, "Cannot stage the command: "+err.Error(), nil)
			return
		}
		_, werr := f.WriteString(*req.Command)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			_ = os.Remove(f.Name())
			writeFail(w, http.StatusInternalServerError, "Cannot stage the command: "+werr.Error(), nil)
			return
		}
		spec.argv = []string{"bash", "--noprofile", "--norc", f.Name()}
		cleanup = func() { _ = os.Remove(f.Name()) }
	default:
		spec.argv = []string{"bash", "--noprofile", "--norc", "-c", *req.Command}
	}
	if req.HardTimeout != nil && *req.HardTimeout > 0 {
		spec.hardTimeout = seconds(*req.HardTimeout)
	}
	applyExtension(&spec, req.XSandgate)
	rl := newRelay(req.XSandgate)
	spec.tap, spec.hold = rl.tap(), hold
	j, err := s.jobs.start(spec)
	if err != nil {
		cleanup()
		startFailed(w, "Failed to start the command", err)
		return
	}
	go func() { <-j.done; cleanup() }()
	s.bash.mu.Lock()
	sess.current = j
	sess.lastUsed = time.Now()
	sess.commandCount++
	s.bash.mu.Unlock()

	finished := false
	if rl != nil {
		finished, _ = rl.run(w, r, j)
	} else {
		finished = waitJob(j, 0, r.Context().Done())
	}
	if !finished {
		// The caller went away: nobody will collect the result, so the
		// command dies with the request.
		s.jobs.kill(j, statusKilled)
		<-j.done
	}
	maxLen := 50000
	if req.MaxOutputLength != nil {
		maxLen = *req.MaxOutputLength
	}
	res := s.bashResult(sess.id, j, maxLen, req.XSandgate != nil)
	if rl != nil {
		rl.finish(res)
		return
	}
	writeOK(w, res)
}

// applyExtension adds the gateway's output and timeout settings to spec.
func applyExtension(spec *jobSpec, x *runExtension) {
	if x == nil {
		return
	}
	if x.OutputLimit > 0 {
		spec.retain = x.OutputLimit
	}
	if x.SpillPath != "" && x.SpillLimit > 0 && filepath.IsAbs(x.SpillPath) {
		spec.spill = &spillSpec{path: filepath.Clean(x.SpillPath), limit: x.SpillLimit}
	}
	if x.TimeoutMS > 0 {
		spec.hardTimeout = time.Duration(x.TimeoutMS) * time.Millisecond
	}
	spec.limits = x.Limits
	if x.Egress != nil {
		spec.env = egressEnv(spec.env, x.Egress.CA)
	}
}

func (s *server) bashResult(sid string, j *job, maxLen int, ext bool) bashExecResult {
	status, code := j.state()
	if status != statusRunning {
		<-j.done // final status: the output is complete too
	}
	out, outTrunc := j.out.Bytes(stdout)
	errb, errTrunc := j.out.Bytes(stderr)
	res := bashExecResult{
		SessionID: sid, CommandID: j.id, Command: j.label, Status: status, ExitCode: code,
		Stdout: nonEmpty(middleTruncate(string(out), maxLen)), Stderr: nonEmpty(middleTruncate(string(errb), maxLen)),
		Offset: len(out), StderrOffset: len(errb),
	}
	if ext {
		res.XSandgate = s.runOutput(j, out, errb, outTrunc, errTrunc)
	}
	return res
}

func (s *server) runOutput(j *job, out, errb []byte, outTrunc, errTrunc bool) *runOutput {
	truncated := outTrunc || errTrunc
	ro := &runOutput{
		StdoutB64: base64.StdEncoding.EncodeToString(out), StderrB64: base64.StdEncoding.EncodeToString(errb),
		Truncated: truncated, StdoutTruncated: outTrunc, StderrTruncated: errTrunc,
	}
	j.mu.Lock()
	if truncated && j.spilled != "" {
		ro.SpillPath = ptr(j.spilled)
	}
	end := j.finished
	j.mu.Unlock()
	if end.IsZero() {
		end = time.Now()
	}
	ro.DurationMS = end.Sub(j.started).Milliseconds()
	return ro
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func seconds(f float64) time.Duration {
	if f > math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(f * float64(time.Second))
}

type bashKillReq struct {
	SessionID *string `json:"session_id"`
	Signal    *string `json:"signal"`
}

func (s *server) handleBashKill(w http.ResponseWriter, r *http.Request) {
	var req bashKillReq
	if !decodeBody(w, r, &req, "session_id") {
		return
	}
	verr := &validationError{}
	literal(verr, "signal", req.Signal, "SIGTERM", "SIGKILL", "SIGINT")
	if !check(w, verr) {
		return
	}
	sess := s.bash.lookup(*req.SessionID)
	if sess == nil {
		writeFail(w, http.StatusNotFound, "Session not found", nil)
		return
	}
	sig := syscall.SIGTERM
	if req.Signal != nil {
		sig = map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "SIGINT": syscall.SIGINT}[*req.Signal]
	}
	s.bash.mu.Lock()
	j := sess.current
	s.bash.mu.Unlock()
	if j == nil || isDone(j) {
		writeOK(w, map[string]any{"session_id": sess.id, "command_id": nil, "signal": sigName(sig), "status": "no_running_command"})
		return
	}
	s.jobs.signal(j, sig)
	if sig == syscall.SIGKILL {
		<-j.done
	} else {
		waitJob(j, time.Second, r.Context().Done())
	}
	status, code := j.state()
	writeOK(w, map[string]any{"session_id": sess.id, "command_id": j.id, "signal": sigName(sig), "status": status, "exit_code": code})
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGINT:
		return "SIGINT"
	default:
		return "SIGTERM"
	}
}

type bashSessionInfo struct {
	SessionID      string  `json:"session_id"`
	Status         string  `json:"status"`
	WorkingDir     string  `json:"working_dir"`
	CreatedAt      string  `json:"created_at"`
	LastUsedAt     string  `json:"last_used_at"`
	CurrentCommand *string `json:"current_command"`
	CommandCount   int     `json:"command_count"`
}

func (b *bashSessions) infoLocked(sess *bashSession) bashSessionInfo {
	info := bashSessionInfo{
		SessionID: sess.id, Status: "ready", WorkingDir: sess.workingDir,
		CreatedAt: sess.created.UTC().Format(time.RFC3339Nano), LastUsedAt: sess.lastUsed.UTC().Format(time.RFC3339Nano),
		CommandCount: sess.commandCount,
	}
	if sess.closed {
		info.Status = "closed"
	}
	if sess.current != nil && !isDone(sess.current) {
		info.CurrentCommand = ptr(sess.current.label)
	}
	return info
}

type bashCreateReq struct {
	SessionID    *string `json:"session_id"`
	ExecDir      *string `json:"exec_dir"`
	SnapshotPath *string `json:"snapshot_path"`
}

func (s *server) handleBashSessionCreate(w http.ResponseWriter, r *http.Request) {
	var req bashCreateReq
	if !decodeBody(w, r, &req) {
		return
	}
	if req.SnapshotPath != nil && *req.SnapshotPath != "" {
		writeFail(w, http.StatusBadRequest, "snapshot_path is not supported by sandboxd", nil)
		return
	}
	dir := ""
	if req.ExecDir != nil && *req.ExecDir != "" {
		if err := checkDir(*req.ExecDir); err != nil {
			writeFail(w, http.StatusBadRequest, "Invalid exec_dir: "+err.Error(), nil)
			return
		}
		dir = *req.ExecDir
	}
	id := ""
	if req.SessionID != nil {
		id = *req.SessionID
	}
	sess := s.bash.get(id, dir)
	s.bash.mu.Lock()
	info := s.bash.infoLocked(sess)
	s.bash.mu.Unlock()
	writeOK(w, info)
}

func (s *server) handleBashSessions(w http.ResponseWriter, _ *http.Request) {
	s.bash.mu.Lock()
	out := make([]bashSessionInfo, 0, len(s.bash.m))
	for _, sess := range s.bash.m {
		out = append(out, s.bash.infoLocked(sess))
	}
	s.bash.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	writeOK(w, out)
}

func (s *server) handleBashSessionClose(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.bash.close(id) {
		writeFail(w, http.StatusNotFound, "Session not found", nil)
		return
	}
	writeOK(w, map[string]any{"session_id": id, "status": "closed"})
}
