package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio/aiowire"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/executors/process"
)

// Command statuses of /v1/bash (aio-api.md §2.3).
const (
	statusRunning   = "running"
	statusCompleted = "completed"
	statusTimedOut  = "timed_out"
	statusKilled    = "killed"
)

// jobSpec is one command to start.
type jobSpec struct {
	argv  []string
	dir   string
	env   map[string]string
	stdin string
	// retain is the number of bytes kept per stream (0: the default).
	retain int
	spill  *spillSpec
	// hardTimeout kills the tree and ends the job as timed_out (0: none).
	hardTimeout time.Duration
	// limits are per-run rlimits applied through the shell (nil: none).
	limits *runLimits
	// headroomMB is added to the address-space limit (nodeHeadroomMB for
	// node).
	headroomMB int
	// label is the command text reported by the API.
	label string
	// tap receives the output as it is kept (a streamed answer's queue);
	// nil: nobody streams.
	tap func(output.Chunk)
	// hold, when set, is a held run's wait for its release (hold.go): a
	// run stopped at its exec waits there, any other before its start.
	// The run starts only when hold returns nil.
	hold func() error
}

// runLimits are the rlimits of one run, applied with ulimit before the
// interpreter starts (aiowire). Zero fields are not set.
type runLimits = aiowire.RunLimits

// job is one running or finished command.
type job struct {
	id      string
	label   string
	started time.Time
	root    treeRoot
	out     *output.Collector
	done    chan struct{} // closed once the status is final and output complete

	mu       sync.Mutex
	status   string
	exitCode *int
	finished time.Time
	spilled  string
}

// state returns the status and exit code.
func (j *job) state() (string, *int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.status, j.exitCode
}

// jobTable runs commands and knows every live one, so that a kill sweep
// never reaches another run's processes.
type jobTable struct {
	cfg config
	mu  sync.Mutex
	// live maps a job id to its job while its process tree may exist.
	live map[string]*job
	// trees are long-lived process trees that are not jobs (the
	// browser): no job's sweep may kill them.
	trees map[int]treeRoot
	trap  execTrap
}

func newJobTable(cfg config) *jobTable {
	t := &jobTable{cfg: cfg, live: make(map[string]*job), trees: make(map[int]treeRoot)}
	go t.trap.probe()
	return t
}

// startTree starts cmd, a long-lived tree (the browser, a kernel) whose
// environment carries marker, and registers it under t.mu, as start does
// for a run: a sweep's scan that lists the new root mid-exec, before its
// marker is readable, finds it among the others (othersOf waits for the
// lock) and spares it. Registered after the start instead, such a root
// could be taken for the sweeping run's orphan. The returned func removes
// the registration.
func (t *jobTable) startTree(cmd *exec.Cmd, marker string) (treeRoot, func(), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return treeRoot{}, nil, err
	}
	root := rootOf(cmd.Process.Pid, marker)
	t.trees[root.pid] = root
	return root, func() {
		t.mu.Lock()
		delete(t.trees, root.pid)
		t.mu.Unlock()
	}, nil
}

// rootOf is the root of a tree just started: its pid, its start time
// (so a reused pid is not taken for it) and its run marker.
func rootOf(pid int, marker string) treeRoot {
	root := treeRoot{pid: pid, marker: marker}
	if p, ok := readProc(pid); ok {
		root.start = p.start
	}
	return root
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// env builds a command's whole environment: nothing of sandboxd's own.
// It is every backend's (executors.Env) with sandboxd's HOME, and PWD set
// to the command's directory as a shell launching it would (the other
// backends start programs through one).
func (t *jobTable) env(extra map[string]string, dir, marker string) []string {
	base := map[string]string{}
	for _, kv := range executors.Env(t.cfg.Path, t.cfg.Lang) {
		k, v, _ := strings.Cut(kv, "=")
		base[k] = v
	}
	base["HOME"] = t.cfg.Home
	if dir != "" {
		base["PWD"] = dir
	}
	for k, v := range extra {
		if k != "" && !strings.ContainsAny(k, "=\x00") && !strings.Contains(v, "\x00") {
			base[k] = v
		}
	}
	base[markerEnv] = marker
	out := make([]string, 0, len(base))
	for k, v := range base {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// launchPlan is how a run gets its per-run rlimits. A program read from
// stdin (python, node) cannot run before its text arrives: its limits are
// set with prlimit(2) between the start and the first byte, at no cost
// (gate). Any other is stopped at its exec and given them there
// (exectrap.go, trapped), or, where ptrace is refused, goes through a
// shell that sets them first (argv).
type launchPlan struct {
	argv    []string
	lim     appliedLimits
	gate    bool
	trapped bool
}

// plan resolves spec's limits and how they are applied.
func (t *jobTable) plan(spec jobSpec) launchPlan {
	lp := launchPlan{argv: spec.argv}
	if spec.limits == nil {
		return lp
	}
	lp.lim = resolveLimits(*spec.limits, spec.headroomMB, func() int {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.baselineLocked()
	})
	lp.gate = spec.stdin != ""
	lp.trapped = !lp.gate && t.trap.works()
	if !lp.gate && !lp.trapped {
		lp.argv = append([]string{"/bin/sh", "-c", ulimitScript(lp.lim), "sh"}, spec.argv...)
	}
	return lp
}

// start launches spec in its own process group.
func (t *jobTable) start(spec jobSpec) (*job, error) {
	lp := t.plan(spec)
	if spec.hold != nil && !lp.trapped {
		if err := spec.hold(); err != nil {
			return nil, err
		}
	}
	if lp.trapped {
		// ptrace answers only the thread that started the child, and a
		// held run is let go after t.mu is released.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	id := newID()
	cmd := exec.Command(lp.argv[0], lp.argv[1:]...)
	cmd.Dir = spec.dir
	cmd.Env = t.env(spec.env, spec.dir, id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdinW *os.File
	if spec.stdin != "" {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer r.Close() // the child has its copy once started
		cmd.Stdin, stdinW = r, w
	}
	readers, writers, err := outputPipes()
	if err != nil {
		closeAll(nil, []*os.File{stdinW})
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = writers[stdout], writers[stderr]
	retain := spec.retain
	if retain <= 0 {
		retain = t.cfg.RetainBytes
	}
	j := &job{id: id, label: spec.label, started: time.Now(), out: newOutput(retain, spec.spill, t.cfg.Workspace, spec.tap),
		done: make(chan struct{}), status: statusRunning}
	err = t.launch(cmd, j, lp)
	closeAll(nil, writers[:])
	if err == nil {
		err = t.letGo(cmd, j, lp, spec.hold)
	}
	if err != nil {
		closeAll(readers[:], []*os.File{stdinW})
		return nil, err
	}
	if stdinW != nil {
		go func() {
			// EPIPE when the program exits without reading it all.
			_, _ = io.WriteString(stdinW, spec.stdin)
			_ = stdinW.Close()
		}()
	}
	go t.supervise(j, cmd, readers, spec.hardTimeout)
	return j, nil
}

// outputPipes makes the stdout and stderr pipes. They are made here, not
// by os/exec, so that Wait returns as soon as the process exits; the
// readers are drained separately and cut off after WaitDelay if a
// detached child holds a pipe open.
func outputPipes() (readers, writers [2]*os.File, err error) {
	for i := range readers {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(readers[:], writers[:])
			return readers, writers, err
		}
		readers[i], writers[i] = r, w
	}
	return readers, writers, nil
}

// launch starts cmd (stopped at its exec when trapped) and registers j
// under t.mu, so that no sweep takes the new root for an orphan.
func (t *jobTable) launch(cmd *exec.Cmd, j *job, lp launchPlan) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var err error
	if lp.trapped {
		err = startStopped(cmd, func(pid int) error { return setLimits(pid, lp.lim) })
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return err
	}
	j.root = rootOf(cmd.Process.Pid, j.id)
	t.live[j.id] = j
	return nil
}

// letGo lets a started run go: a trapped one once hold releases it, a
// gated one once its limits are set. A run that is not let go is killed
// and reaped before its first instruction and leaves the table.
func (t *jobTable) letGo(cmd *exec.Cmd, j *job, lp launchPlan, hold func() error) error {
	var err error
	if lp.trapped {
		err = resumeStopped(cmd, hold) // abandons the child itself
	}
	if err == nil && lp.gate {
		if err = setLimits(cmd.Process.Pid, lp.lim); err != nil {
			_ = process.KillGroup(cmd.Process.Pid)
			_ = cmd.Wait()
		}
	}
	if err != nil {
		t.mu.Lock()
		delete(t.live, j.id)
		t.mu.Unlock()
	}
	return err
}

// supervise pumps j's output, enforces hardTimeout, and on the process's
// exit settles j's status, ends what is left of its group and its pipes,
// and takes j out of the table.
func (t *jobTable) supervise(j *job, cmd *exec.Cmd, readers [2]*os.File, hardTimeout time.Duration) {
	var pumps sync.WaitGroup
	for i, w := range []io.Writer{j.out.Stdout(), j.out.Stderr()} {
		pumps.Go(func() { pump(readers[i], w) })
	}
	var timer *time.Timer
	if hardTimeout > 0 {
		timer = time.AfterFunc(hardTimeout, func() { t.kill(j, statusTimedOut) })
	}
	werr := cmd.Wait()
	if timer != nil {
		timer.Stop()
	}
	j.mu.Lock()
	if j.status == statusRunning {
		j.status = statusCompleted
		j.exitCode = ptr(exitCode(cmd.ProcessState, werr))
	}
	j.mu.Unlock()
	// Children left in the group would hold the pipes: they end with the
	// command. Detached ones are cut off after WaitDelay.
	_ = process.KillGroup(j.root.pid)
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(t.cfg.WaitDelay):
		for _, r := range readers {
			_ = r.SetReadDeadline(time.Now())
		}
		<-drained
	}
	closeAll(readers[:], nil)
	spilled := j.out.Finish().SpillPath
	j.mu.Lock()
	j.finished = time.Now()
	j.spilled = spilled
	j.mu.Unlock()
	t.mu.Lock()
	delete(t.live, j.id)
	t.mu.Unlock()
	close(j.done)
}

// kill ends j's whole tree and sets its final status, unless it already
// finished.
func (t *jobTable) kill(j *job, status string) {
	j.mu.Lock()
	if j.status != statusRunning {
		j.mu.Unlock()
		return
	}
	j.status = status
	j.mu.Unlock()
	t.sweep(j).kill(2 * time.Second)
}

// signal sends sig to j's process group only (/v1/bash/kill with SIGTERM
// or SIGINT): the program may handle it.
func (t *jobTable) signal(j *job, sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		t.kill(j, statusKilled)
		return
	}
	j.mu.Lock()
	running := j.status == statusRunning
	j.mu.Unlock()
	if running {
		_ = process.SignalGroup(j.root.pid, sig)
	}
}

func (t *jobTable) sweep(j *job) sweep { return t.sweepTree(j.root) }

// sweepTree describes the kill of root's tree, sparing every other live
// job and registered tree: those of the moment of each scan (othersOf), so
// that a run started while the sweep goes on is spared too.
func (t *jobTable) sweepTree(root treeRoot) sweep {
	return sweep{target: root, others: t.othersOf(root), live: func() []treeRoot { return t.othersOf(root) },
		orphans: t.cfg.Contained, self: os.Getpid(), uid: os.Geteuid()}
}

// othersOf is every live job's and registered tree's root but root. A run
// is registered under t.mu as it starts (start), so a process a scan
// lists belongs to a run othersOf, called after the listing, includes.
func (t *jobTable) othersOf(root treeRoot) []treeRoot {
	t.mu.Lock()
	defer t.mu.Unlock()
	others := make([]treeRoot, 0, len(t.live)+len(t.trees))
	for _, o := range t.live {
		if o.root.pid != root.pid {
			others = append(others, o.root)
		}
	}
	for pid, o := range t.trees {
		if pid != root.pid {
			others = append(others, o)
		}
	}
	return others
}

// killAll kills every live job (shutdown).
func (t *jobTable) killAll() {
	t.mu.Lock()
	jobs := make([]*job, 0, len(t.live))
	for _, j := range t.live {
		jobs = append(jobs, j)
	}
	t.mu.Unlock()
	for _, j := range jobs {
		t.kill(j, statusKilled)
	}
}

// exitCode is the shell's view of how the process ended: its exit status,
// or 128+signal.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return 127
		}
		return 0
	}
	return process.ExitCode(ps)
}

func closeAll(a, b []*os.File) {
	for _, f := range append(a, b...) {
		if f != nil {
			_ = f.Close()
		}
	}
}

// clampLimits lowers each limit to sandboxd's own hard limit, which its
// children inherit and cannot raise.
func clampLimits(lim runLimits) runLimits {
	clamp := func(v, res int, unit uint64) int {
		var cur unix.Rlimit
		if v <= 0 || unix.Getrlimit(res, &cur) != nil || cur.Max == unix.RLIM_INFINITY {
			return v
		}
		return int(min(uint64(v), cur.Max/unit))
	}
	lim.CPUSeconds = clamp(lim.CPUSeconds, unix.RLIMIT_CPU, 1)
	lim.MaxOpenFiles = clamp(lim.MaxOpenFiles, unix.RLIMIT_NOFILE, 1)
	lim.MaxFileSizeMB = clamp(lim.MaxFileSizeMB, unix.RLIMIT_FSIZE, 1<<20)
	return lim
}

// rlimits is lim in the shared representation (executors/process).
func (lim appliedLimits) rlimits() process.Rlimits {
	return process.Rlimits{CPUSeconds: lim.CPUSeconds, AddressSpaceBytes: lim.addressSpaceMB << 20,
		OpenFiles: lim.MaxOpenFiles, Procs: lim.nproc, FileSizeBytes: lim.MaxFileSizeMB << 20}
}

// setLimits applies lim to pid with prlimit(2) (same uid: allowed, and
// only lowering).
func setLimits(pid int, lim appliedLimits) error { return lim.rlimits().Prlimit(pid) }

// ulimitScript sets lim and then executes the command line passed as
// arguments.
func ulimitScript(lim appliedLimits) string { return lim.rlimits().UlimitScript() + `exec "$@"` }

// waitJob waits for j to finish, at most d (d <= 0: no limit), or until
// cancel is closed. It reports whether j finished.
func waitJob(j *job, d time.Duration, cancel <-chan struct{}) bool {
	var tc <-chan time.Time
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		tc = timer.C
	}
	select {
	case <-j.done:
		return true
	case <-tc:
		return false
	case <-cancel:
		return false
	}
}

// errNoDir is returned for an exec_dir that does not exist.
var errNoDir = errors.New("directory does not exist")

// checkDir validates a working directory.
func checkDir(dir string) error {
	if !strings.HasPrefix(dir, "/") {
		return fmt.Errorf("%q is not an absolute path", dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%w: %s", errNoDir, dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}
