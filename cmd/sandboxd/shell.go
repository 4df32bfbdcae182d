package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/sandgate/sandgate/executors/process"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/executors/output"
)

// Shell command statuses (aio-api.md §2.2).
const (
	shellRunning       = "running"
	shellCompleted     = "completed"
	shellNoChange      = "no_change_timeout"
	shellHardTimeout   = "hard_timeout"
	shellTerminated    = "terminated"
	defaultNoChangeSec = 120
)

// shellSession is a persistent bash: cwd, variables and functions carry
// over from one command to the next. Output is one combined stream. One
// command runs at a time; a second exec waits for the first to finish.
//
// Each command is written to a file and sourced with stdin from /dev/null,
// followed by a sentinel line carrying its exit status and the new cwd. A
// syntax error therefore cannot swallow the sentinel, and a command that
// reads stdin cannot eat the next one. A bare `exit` ends the shell (the
// upstream server hangs then, deer-flow #5546): here the command completes
// with that status and the next one gets a fresh shell in the last cwd.
type shellSession struct {
	id       string
	created  time.Time
	noChange time.Duration
	turn     chan struct{} // a token: held while a command runs

	mu         sync.Mutex
	workingDir string
	lastUsed   time.Time
	proc       *shellProc
	cur        *shellCmd
	closed     bool
}

type shellProc struct {
	root   treeRoot
	stdin  *os.File
	exited chan struct{}
	status int
	drop   func()
}

type shellCmd struct {
	command  string
	sentinel []byte
	file     string
	out      *output.Collector
	tail     []byte // bytes not yet known to be output (may start the sentinel)
	done     chan struct{}
	status   string
	exitCode *int
	lastOut  time.Time
}

type shellSessions struct {
	s       *server
	mu      sync.Mutex
	m       map[string]*shellSession
	implied string // the id of the shared session used by id-less execs
}

func newShellSessions(s *server) *shellSessions {
	return &shellSessions{s: s, m: make(map[string]*shellSession)}
}

func (ss *shellSessions) create(id, dir string, noChange int) *shellSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if id == "" {
		id = newID()
	}
	if sess, ok := ss.m[id]; ok {
		return sess
	}
	if dir == "" {
		dir = ss.s.cfg.Workspace
	}
	if noChange <= 0 {
		noChange = defaultNoChangeSec
	}
	now := time.Now()
	sess := &shellSession{id: id, created: now, lastUsed: now, workingDir: dir,
		noChange: time.Duration(noChange) * time.Second, turn: make(chan struct{}, 1)}
	ss.m[id] = sess
	// At the cap, the least recently used idle session makes room (the
	// upstream behaviour: its next exec then gets 404).
	for len(ss.m) > ss.s.cfg.MaxShellSessions {
		var oldest *shellSession
		for _, o := range ss.m {
			if o != sess && !o.busy() && (oldest == nil || o.lastUsed.Before(oldest.lastUsed)) {
				oldest = o
			}
		}
		if oldest == nil {
			break
		}
		delete(ss.m, oldest.id)
		go ss.s.shellStop(oldest)
	}
	return sess
}

func (ss *shellSessions) lookup(id string) *shellSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.m[id]
}

// implicit returns the shared session of id-less execs.
func (ss *shellSessions) implicit() *shellSession {
	ss.mu.Lock()
	id := ss.implied
	sess := ss.m[id]
	ss.mu.Unlock()
	if sess != nil {
		return sess
	}
	sess = ss.create("", "", 0)
	ss.mu.Lock()
	ss.implied = sess.id
	ss.mu.Unlock()
	return sess
}

func (ss *shellSessions) remove(id string) *shellSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sess := ss.m[id]
	delete(ss.m, id)
	return sess
}

func (ss *shellSessions) closeAll() {
	ss.mu.Lock()
	all := make([]*shellSession, 0, len(ss.m))
	for id, sess := range ss.m {
		all = append(all, sess)
		delete(ss.m, id)
	}
	ss.mu.Unlock()
	for _, sess := range all {
		ss.s.shellStop(sess)
	}
}

func (sess *shellSession) busy() bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.cur != nil && !isClosed(sess.cur.done)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// shellStop kills the session's shell and its running command.
func (s *server) shellStop(sess *shellSession) {
	sess.mu.Lock()
	sess.closed = true
	p := sess.proc
	if sess.cur != nil && sess.cur.status == shellRunning {
		sess.cur.status = shellTerminated
	}
	sess.mu.Unlock()
	if p != nil {
		s.jobs.sweepTree(p.root).kill(2 * time.Second)
	}
}

// startShell starts the session's bash; called with sess.mu held.
func (s *server) startShell(sess *shellSession) error {
	marker := "shell-" + newID() // unique per shell: a late sweep of an old one spares the next
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir = sess.workingDir
	if _, err := os.Stat(cmd.Dir); err != nil {
		cmd.Dir = s.cfg.Workspace
	}
	cmd.Env = s.jobs.env(nil, cmd.Dir, marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll([]*os.File{inR, inW}, nil)
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, outW
	err = cmd.Start()
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		closeAll([]*os.File{inW, outR}, nil)
		return err
	}
	p := &shellProc{root: treeRoot{pid: cmd.Process.Pid, marker: marker}, stdin: inW, exited: make(chan struct{})}
	if st, ok := readProc(p.root.pid); ok {
		p.root.start = st.start
	}
	p.drop = s.jobs.addTree(p.root)
	sess.proc = p
	readDone := make(chan struct{})
	go func() {
		s.shellRead(sess, p, outR)
		close(readDone)
	}()
	go func() {
		werr := cmd.Wait()
		p.status = exitCode(cmd.ProcessState, werr)
		_ = inW.Close()
		p.drop()
		close(p.exited)
		// Leftovers of the shell's group end with it; detached ones would
		// hold the output pipe open forever.
		_ = process.KillGroup(p.root.pid)
		cut := time.AfterFunc(s.cfg.WaitDelay, func() { _ = outR.SetReadDeadline(time.Now()) })
		<-readDone // the output the shell wrote before it exited
		cut.Stop()
		sess.mu.Lock()
		if sess.proc == p {
			sess.proc = nil
		}
		c := sess.cur
		if c != nil && !isClosed(c.done) {
			c.flushTail()
			if c.status == shellRunning {
				c.status = shellCompleted
				c.exitCode = ptr(p.status)
			}
			c.finish()
		}
		sess.mu.Unlock()
	}()
	return nil
}

// shellRead feeds the shell's output to the running command.
func (s *server) shellRead(sess *shellSession, p *shellProc, r *os.File) {
	defer r.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			sess.mu.Lock()
			if c := sess.cur; c != nil && !isClosed(c.done) && sess.proc == p {
				if code, cwd, ok := c.feed(buf[:n]); ok {
					c.status = shellCompleted
					c.exitCode = ptr(code)
					if cwd != "" {
						sess.workingDir = cwd
					}
					c.finish()
				}
			}
			sess.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// feed adds output, looking for the sentinel line "\n<sentinel> <rc> <cwd>\n".
func (c *shellCmd) feed(p []byte) (code int, cwd string, done bool) {
	c.lastOut = time.Now()
	data := append(c.tail, p...)
	if i := bytes.Index(data, c.sentinel); i >= 0 {
		rest := data[i+len(c.sentinel):]
		if j := bytes.IndexByte(rest, '\n'); j >= 0 {
			c.out.Write(stdout, data[:i])
			fields := strings.SplitN(string(rest[:j]), " ", 3)
			if len(fields) == 3 {
				code, _ = strconv.Atoi(fields[1])
				cwd = fields[2]
			}
			c.tail = nil
			return code, cwd, true
		}
		c.out.Write(stdout, data[:i])
		c.tail = append([]byte(nil), data[i:]...)
		return 0, "", false
	}
	// Keep back what could be the start of the sentinel.
	keep := min(len(data), len(c.sentinel)-1)
	for ; keep > 0; keep-- {
		if bytes.HasPrefix(c.sentinel, data[len(data)-keep:]) {
			break
		}
	}
	c.out.Write(stdout, data[:len(data)-keep])
	c.tail = append([]byte(nil), data[len(data)-keep:]...)
	return 0, "", false
}

func (c *shellCmd) flushTail() {
	c.out.Write(stdout, c.tail)
	c.tail = nil
}

func (c *shellCmd) finish() {
	c.out.Finish()
	if c.file != "" {
		_ = os.Remove(c.file)
	}
	close(c.done)
}

// output returns the command's output; the newline the sentinel line
// starts with is not part of it.
func (c *shellCmd) output() string {
	b, _ := c.out.Bytes(stdout)
	return string(b)
}

type shellExecReq struct {
	Command          *string  `json:"command"`
	ID               *string  `json:"id"`
	ExecDir          *string  `json:"exec_dir"`
	AsyncMode        bool     `json:"async_mode"`
	Timeout          *float64 `json:"timeout"`
	Strict           *bool    `json:"strict"`
	NoChangeTimeout  *int     `json:"no_change_timeout"`
	HardTimeout      *float64 `json:"hard_timeout"`
	PreserveSymlinks *bool    `json:"preserve_symlinks"`
	Truncate         *bool    `json:"truncate"`
}

type consoleRecord struct {
	PS1     string `json:"ps1"`
	Command string `json:"command"`
	Output  string `json:"output"`
}

type shellResult struct {
	SessionID string          `json:"session_id"`
	Command   string          `json:"command"`
	Status    string          `json:"status"`
	Output    *string         `json:"output"`
	Console   []consoleRecord `json:"console"`
	ExitCode  *int            `json:"exit_code"`
}

// shellTruncate is the upstream output cap of shell exec (truncate=true).
const shellTruncate = 30000

func (s *server) handleShellExec(w http.ResponseWriter, r *http.Request) {
	var req shellExecReq
	if !decodeBody(w, r, &req, "command") {
		return
	}
	var sess *shellSession
	if req.ID != nil && *req.ID != "" {
		if sess = s.shell.lookup(*req.ID); sess == nil {
			writeJSON(w, http.StatusNotFound, sessionNotFound{Message: "Session not found"})
			return
		}
	} else {
		sess = s.shell.implicit()
	}
	dir := ""
	if req.ExecDir != nil && *req.ExecDir != "" {
		if err := checkDir(*req.ExecDir); err != nil {
			if req.Strict != nil && *req.Strict {
				writeFail(w, http.StatusBadRequest, "Invalid exec_dir: "+err.Error(), nil)
				return
			}
		} else {
			dir = *req.ExecDir
		}
	}
	// One command at a time: wait for the session's turn.
	select {
	case sess.turn <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	c, err := s.shellStart(sess, *req.Command, dir)
	if err != nil {
		<-sess.turn
		writeFail(w, http.StatusInternalServerError, "Failed to run the command: "+err.Error(), nil)
		return
	}
	go func() { <-c.done; <-sess.turn }()

	var hard *time.Timer
	if req.HardTimeout != nil && *req.HardTimeout > 0 {
		hard = time.AfterFunc(seconds(*req.HardTimeout), func() { s.shellKill(sess, c, shellHardTimeout) })
		go func() { <-c.done; hard.Stop() }()
	}
	status := shellRunning
	if !req.AsyncMode {
		status = s.shellWait(r.Context(), sess, c, req)
	}
	truncate := req.Truncate == nil || *req.Truncate
	writeOK(w, s.shellResultOf(sess, c, status, truncate))
}

// shellStart writes the command file and hands it to the shell.
func (s *server) shellStart(sess *shellSession, command, dir string) (*shellCmd, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if dir != "" {
		sess.workingDir = dir
	}
	if sess.proc == nil {
		if err := s.startShell(sess); err != nil {
			return nil, err
		}
	}
	f, err := os.CreateTemp("", "sandboxd-shell-*.sh")
	if err != nil {
		return nil, err
	}
	_, werr := f.WriteString(command)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return nil, werr
	}
	nonce := newID()
	c := &shellCmd{command: command, sentinel: []byte("\n__SANDBOXD_DONE_" + nonce + "__"), file: f.Name(),
		out: output.New(output.Options{Limit: s.cfg.RetainBytes}), done: make(chan struct{}), status: shellRunning, lastOut: time.Now()}
	var script strings.Builder
	if dir != "" {
		script.WriteString("cd -- " + shellQuote(dir) + "\n")
	}
	fmt.Fprintf(&script, ". %s </dev/null\nprintf '\\n%%s %%d %%s\\n' %s \"$?\" \"$PWD\"\n",
		shellQuote(f.Name()), shellQuote(string(c.sentinel[1:])))
	sess.cur = c
	sess.lastUsed = time.Now()
	if _, err := sess.proc.stdin.WriteString(script.String()); err != nil {
		c.status = shellCompleted
		c.exitCode = ptr(sess.proc.status)
		c.finish()
	}
	return c, nil
}

// shellWait waits for the command as the request asks and returns the
// status to report.
func (s *server) shellWait(ctx context.Context, sess *shellSession, c *shellCmd, req shellExecReq) string {
	noChange := sess.noChange
	if req.NoChangeTimeout != nil && *req.NoChangeTimeout > 0 {
		noChange = time.Duration(*req.NoChangeTimeout) * time.Second
	}
	var soft <-chan time.Time
	if req.Timeout != nil && *req.Timeout > 0 {
		t := time.NewTimer(seconds(*req.Timeout))
		defer t.Stop()
		soft = t.C
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			sess.mu.Lock()
			defer sess.mu.Unlock()
			return c.status
		case <-soft:
			return shellRunning
		case <-ctx.Done():
			return shellRunning
		case <-tick.C:
			sess.mu.Lock()
			quiet := time.Since(c.lastOut)
			sess.mu.Unlock()
			if quiet >= noChange {
				return shellNoChange
			}
		}
	}
}

// shellKill ends the running command by killing the session's shell tree.
func (s *server) shellKill(sess *shellSession, c *shellCmd, status string) {
	sess.mu.Lock()
	if isClosed(c.done) || sess.cur != c {
		sess.mu.Unlock()
		return
	}
	c.status = status
	p := sess.proc
	sess.mu.Unlock()
	if p != nil {
		s.jobs.sweepTree(p.root).kill(2 * time.Second)
		<-p.exited
	}
	<-c.done
}

func (s *server) shellResultOf(sess *shellSession, c *shellCmd, status string, truncate bool) shellResult {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	res := shellResult{SessionID: sess.id, Command: c.command, Status: status, Console: []consoleRecord{}}
	if isClosed(c.done) {
		res.Status = c.status
		out := c.output()
		if truncate && len(out) > shellTruncate {
			head, _ := output.Head([]byte(out), shellTruncate)
			out = string(head) + "\n... [output truncated] ..."
		}
		res.Output = &out
		res.ExitCode = c.exitCode
		res.Console = append(res.Console, consoleRecord{PS1: ps1(sess.workingDir), Command: c.command, Output: out})
	}
	return res
}

func ps1(cwd string) string {
	name := strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return name + "@sandbox:" + cwd + " $"
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

type shellIDReq struct {
	ID *string `json:"id"`
}

func (s *server) handleShellView(w http.ResponseWriter, r *http.Request) {
	var req shellIDReq
	if !decodeBody(w, r, &req, "id") {
		return
	}
	sess := s.shell.lookup(*req.ID)
	if sess == nil {
		writeJSON(w, http.StatusNotFound, sessionNotFound{Message: "Session not found"})
		return
	}
	sess.mu.Lock()
	c := sess.cur
	sess.mu.Unlock()
	data := map[string]any{"output": "", "session_id": sess.id, "console": []consoleRecord{}, "status": "idle", "command": nil, "exit_code": nil}
	if c != nil {
		sess.mu.Lock()
		data["output"], data["command"], data["status"], data["exit_code"] = c.output(), c.command, c.status, c.exitCode
		sess.mu.Unlock()
	}
	writeOK(w, data)
}

func (s *server) handleShellKill(w http.ResponseWriter, r *http.Request) {
	var req shellIDReq
	if !decodeBody(w, r, &req, "id") {
		return
	}
	sess := s.shell.lookup(*req.ID)
	if sess == nil {
		writeJSON(w, http.StatusNotFound, sessionNotFound{Message: "Session not found"})
		return
	}
	sess.mu.Lock()
	c := sess.cur
	sess.mu.Unlock()
	if c == nil || isClosed(c.done) {
		writeOK(w, map[string]any{"status": "idle", "exit_code": nil, "returncode": nil})
		return
	}
	s.shellKill(sess, c, shellTerminated)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	writeOK(w, map[string]any{"status": c.status, "exit_code": c.exitCode, "returncode": c.exitCode})
}

type shellCreateReq struct {
	ID               *string `json:"id"`
	ExecDir          *string `json:"exec_dir"`
	NoChangeTimeout  *int    `json:"no_change_timeout"`
	PreserveSymlinks *bool   `json:"preserve_symlinks"`
}

func (s *server) handleShellSessionCreate(w http.ResponseWriter, r *http.Request) {
	var req shellCreateReq
	if !decodeBody(w, r, &req) {
		return
	}
	dir := ""
	if req.ExecDir != nil && *req.ExecDir != "" {
		if err := checkDir(*req.ExecDir); err != nil {
			writeFail(w, http.StatusBadRequest, "Invalid exec_dir: "+err.Error(), nil)
			return
		}
		dir = filepath.Clean(*req.ExecDir)
	}
	id, nc := "", 0
	if req.ID != nil {
		id = *req.ID
	}
	if req.NoChangeTimeout != nil {
		nc = *req.NoChangeTimeout
	}
	sess := s.shell.create(id, dir, nc)
	sess.mu.Lock()
	wd := sess.workingDir
	sess.mu.Unlock()
	writeOK(w, map[string]any{"session_id": sess.id, "working_dir": wd})
}

func (s *server) handleShellSessions(w http.ResponseWriter, _ *http.Request) {
	s.shell.mu.Lock()
	all := make([]*shellSession, 0, len(s.shell.m))
	for _, sess := range s.shell.m {
		all = append(all, sess)
	}
	s.shell.mu.Unlock()
	out := make(map[string]any, len(all))
	for _, sess := range all {
		sess.mu.Lock()
		info := map[string]any{
			"working_dir": sess.workingDir, "created_at": sess.created.UTC().Format(time.RFC3339Nano),
			"last_used_at": sess.lastUsed.UTC().Format(time.RFC3339Nano), "age_seconds": int(time.Since(sess.created).Seconds()),
			"status": "active", "current_command": nil,
		}
		if sess.cur != nil && !isClosed(sess.cur.done) {
			info["current_command"] = sess.cur.command
		}
		sess.mu.Unlock()
		out[sess.id] = info
	}
	writeOK(w, map[string]any{"sessions": out})
}

func (s *server) handleShellSessionDelete(w http.ResponseWriter, r *http.Request) {
	sess := s.shell.remove(r.PathValue("id"))
	if sess == nil {
		writeJSON(w, http.StatusNotFound, sessionNotFound{Message: "Session not found"})
		return
	}
	s.shellStop(sess)
	writeOK(w, map[string]any{"session_id": sess.id, "status": "deleted"})
}

func (s *server) handleShellDeleteAll(w http.ResponseWriter, _ *http.Request) {
	s.shell.closeAll()
	writeOK(w, map[string]any{"status": "deleted"})
}
