package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/kernel"
)

// Pause and resume with memory (issue 30) under gVisor. The engine here
// runs without experimental features, so `docker checkpoint` and `docker
// start --checkpoint` are refused (HTTP 501), and restarting the shared
// engine to enable them would stop every container on it. The executor
// therefore drives runsc itself (../shared/research/gvisor-checkpoint.md):
//
//   - pause: the session's kernel container, which the engine started
//     under runsc, is checkpointed with runsc directly, in the engine's
//     runsc state root (the sandbox stops, the engine sees the container
//     exit), and the container is removed through the engine; its OCI
//     bundle is kept, made standalone (no engine hooks, no namespace
//     paths, the root on the exported runtime root the image was built
//     from, the engine's per-container files copied);
//   - resume: that bundle is created and restored by runsc in a state root
//     of the executor's own, with the driver's stdin and stdout on pipes
//     the executor holds, and it becomes the session's kernel again: the
//     next cell runs in the restored process, with its variables.
//
// gVisor restores a mount's source from the new bundle, so the workspace
// is the session's directory as it is at resume. The restored sandbox is
// not a container of the engine: it is counted, killed and removed by the
// executor (ReleaseSession, idle expiry, pause again).
const (
	// exportedRoots holds the runtime roots `make images` exports, one
	// directory per image's sandgate.rootfs label (scripts/images.sh).
	exportedRoots = "/var/lib/sandgate/rootfs"
	// checkpointTimeout bounds runsc's checkpoint and restore of one
	// kernel (41 MB of pandas take about 0.05 s and 0.2 s here).
	checkpointTimeout = time.Minute
)

// engineRunscRoots are where an engine keeps runsc's state for its
// containers: Docker 20.10's containerd shim (runc's shim with runsc as
// its binary) uses runtime-runc/moby under the engine's exec root.
var engineRunscRoots = []string{"/var/run/docker/runtime-runc/moby", "/run/docker/runtime-runc/moby",
	"/var/run/docker/runtime-runsc/moby"}

// snapshotBase is where checkpoint images and restored sandboxes' state
// live, per executor kind and instance: an executor started again with
// the same instance (a gateway restart) finds its checkpoints there.
func (e *Executor) snapshotBase() string {
	return filepath.Join(e.cfg.SnapshotDir, string(e.cfg.Kind)+"-"+e.cfg.Instance)
}

// restoredRoot is runsc's state root for every restored sandbox of this
// host: one root, since runsc bind-mounts a network namespace file into
// each root it uses and leaves it there.
func restoredRoot() string { return filepath.Join(os.TempDir(), "sandgate-snapshots", "state") }

// restoredPrefix starts the ids of this instance's restored sandboxes,
// so that a restarted executor reaps its own and no other instance's.
func (e *Executor) restoredPrefix() string {
	inst := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, e.cfg.Instance)
	return "sg-" + inst + "--"
}

// checkpoint is one paused session's kernel image.
type checkpoint struct {
	dir   string // bundle (config.json, copied files) and image/
	shape shape
	bytes int64
}

// restoredBox is a kernel sandbox runsc restored outside the engine.
type restoredBox struct {
	root, id, bundle string
}

// ckState is the executors' checkpoints and restored sandboxes. It is
// kept beside the Executor rather than in it so that the engine-facing
// code is not touched by pause (see the file comment).
var ckState = struct {
	mu       sync.Mutex
	paused   map[*Executor]map[string]*checkpoint
	restored map[*box]*restoredBox
	reaped   map[*Executor]bool
	runtimes map[*Executor]runsc
}{paused: map[*Executor]map[string]*checkpoint{}, restored: map[*box]*restoredBox{}, reaped: map[*Executor]bool{},
	runtimes: map[*Executor]runsc{}}

// snapshotMode is what a pause keeps: memory when the executor runs on
// runsc, the engine's runsc state is reachable and the python image's
// exported root exists; the workspace otherwise.
func (e *Executor) snapshotMode() string {
	if !e.cfg.OwnKernel || e.engineRunscRoot() == "" || e.exportedRoot() == "" {
		return executors.SnapshotFilesystem
	}
	return executors.SnapshotMemory
}

func (e *Executor) engineRunscRoot() string {
	for _, r := range engineRunscRoots {
		if st, err := os.Stat(r); err == nil && st.IsDir() {
			return r
		}
	}
	return ""
}

// exportedRoot is the exported runtime root the python image was built
// from, "" when it is not known or not exported.
func (e *Executor) exportedRoot() string {
	ref := e.cfg.Images[executors.LangPython]
	e.imageIDs.mu.Lock()
	label := e.imageIDs.seen[ref].rootFS
	e.imageIDs.mu.Unlock()
	if label == "" || strings.ContainsAny(label, `/\`) || label == ".." {
		return ""
	}
	p := filepath.Join(exportedRoots, label)
	if real, err := filepath.EvalSymlinks(p); err == nil {
		if st, err := os.Stat(real); err == nil && st.IsDir() {
			return real
		}
	}
	return ""
}

// PauseSession implements executors.SessionPauser: the session's kernel
// is checkpointed when memory can be kept, then everything the executor
// holds for the session is released. A checkpoint that fails leaves the
// session paused with its workspace only (the error says why).
func (e *Executor) PauseSession(ctx context.Context, session string) (executors.Paused, error) {
	var p executors.Paused
	var err error
	e.reapRestored(ctx)
	if e.snapshotMode() == executors.SnapshotMemory {
		p, err = e.checkpointKernel(ctx, session)
	}
	_ = e.ReleaseSession(ctx, session)
	return p, err
}

// ResumeSession implements executors.SessionPauser: a checkpointed
// kernel is restored and becomes the session's kernel again.
func (e *Executor) ResumeSession(ctx context.Context, session string) (bool, error) {
	e.reapRestored(ctx)
	ckState.mu.Lock()
	ck := ckState.paused[e][session]
	delete(ckState.paused[e], session)
	ckState.mu.Unlock()
	if ck == nil {
		ck = e.loadCheckpoint(session)
	}
	if ck == nil {
		return false, nil
	}
	k, err := e.restoreKernel(ctx, session, ck)
	if err != nil {
		removeSnapshot(ck.dir)
		return false, err
	}
	ks := e.kernels
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if old := ks.m[session]; old != nil {
		ks.e.discardKernel(old)
	}
	ks.m[session] = k
	ks.had[session] = true
	k.idle = time.AfterFunc(kernelIdle, func() { ks.expire(session, k) })
	return true, nil
}

// checkpointKernel takes the session's kernel from the executor, waits
// for its running cell, and checkpoints its sandbox.
func (e *Executor) checkpointKernel(ctx context.Context, session string) (executors.Paused, error) {
	ks := e.kernels
	ks.mu.Lock()
	k := ks.m[session]
	delete(ks.m, session)
	ks.mu.Unlock()
	if k == nil {
		return executors.Paused{}, nil
	}
	defer e.discardKernel(k)
	if !k.conn.Alive() {
		return executors.Paused{}, nil
	}
	release, err := k.conn.Acquire(ctx)
	if err != nil {
		return executors.Paused{}, fmt.Errorf("docker: wait for the kernel: %w", err)
	}
	defer release()
	rt, err := e.runscRuntime(ctx)
	if err != nil {
		return executors.Paused{}, err
	}
	ck := &checkpoint{dir: filepath.Join(e.snapshotBase(), dirName(session), randomID()), shape: k.b.shape}
	if err := os.MkdirAll(filepath.Join(ck.dir, "image"), 0o700); err != nil {
		return executors.Paused{}, fmt.Errorf("docker: snapshot dir: %w", err)
	}
	root, id := e.engineRunscRoot(), k.b.id
	ckState.mu.Lock()
	rb := ckState.restored[k.b]
	ckState.mu.Unlock()
	if rb != nil {
		root, id = rb.root, rb.id
	}
	if err := e.keepBundle(ctx, rt, root, id, ck.dir); err != nil {
		_ = os.RemoveAll(ck.dir)
		return executors.Paused{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	if err := rt.run(cctx, root, nil, "checkpoint", "--image-path="+filepath.Join(ck.dir, "image"), id); err != nil {
		_ = os.RemoveAll(ck.dir)
		return executors.Paused{}, fmt.Errorf("docker: checkpoint the kernel: %w", err)
	}
	ck.bytes = dirSize(filepath.Join(ck.dir, "image"))
	if err := saveShape(ck); err != nil {
		removeSnapshot(ck.dir)
		return executors.Paused{}, err
	}
	e.log.Info("kernel checkpointed", "session_id", session, "image_mb", ck.bytes>>20)
	ckState.mu.Lock()
	if ckState.paused[e] == nil {
		ckState.paused[e] = map[string]*checkpoint{}
	}
	if old := ckState.paused[e][session]; old != nil {
		_ = os.RemoveAll(old.dir)
	}
	ckState.paused[e][session] = ck
	ckState.mu.Unlock()
	return executors.Paused{Memory: true, Bytes: ck.bytes}, nil
}

// DropPaused implements executors.SessionPauser: a paused session's
// checkpoint is deleted (the session was deleted or expired).
func (e *Executor) DropPaused(_ context.Context, session string) {
	ckState.mu.Lock()
	delete(ckState.paused[e], session)
	ckState.mu.Unlock()
	// Checkpoints an earlier process wrote too; the session's kernels
	// were released before.
	_ = os.RemoveAll(filepath.Join(e.snapshotBase(), dirName(session)))
	_ = os.Remove(e.snapshotBase())
}

// shapeRecord is a checkpoint's shape on disk (shape.json), so that an
// executor started again after a restart restores what an earlier
// process checkpointed, as the kernel of the same shape.
type shapeRecord struct {
	Image, Dir, Runtime, CA, Netns string
	UID, GID                       int
	Limits                         executors.Limits
	Egress                         bool
	Layout                         executors.Layout
}

func saveShape(ck *checkpoint) error {
	sh := ck.shape
	raw, err := json.Marshal(shapeRecord{Image: sh.image, Dir: sh.dir, Runtime: sh.runtime, CA: sh.ca, Netns: sh.netns,
		UID: sh.uid, GID: sh.gid, Limits: sh.limits, Egress: sh.egress, Layout: sh.layout})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(ck.dir, "shape.json"), raw, 0o600)
}

// loadCheckpoint finds the newest complete checkpoint of session on
// disk, nil when there is none. This instance's directory is looked in
// first, then every other instance's of the same kind: in a fleet the
// snapshot directory is shared, and a replica adopts the paused sessions
// of one that is gone (its instance is another).
func (e *Executor) loadCheckpoint(session string) *checkpoint {
	if ck := newestCheckpoint(filepath.Join(e.snapshotBase(), dirName(session))); ck != nil {
		return ck
	}
	others, _ := filepath.Glob(filepath.Join(e.cfg.SnapshotDir, string(e.cfg.Kind)+"-*", dirName(session)))
	for _, d := range others {
		if ck := newestCheckpoint(d); ck != nil {
			return ck
		}
	}
	return nil
}

// newestCheckpoint is the newest complete checkpoint under a session's
// directory.
func newestCheckpoint(sessionDir string) *checkpoint {
	paths, _ := filepath.Glob(filepath.Join(sessionDir, "*", "shape.json"))
	var best *checkpoint
	var bestAt time.Time
	for _, p := range paths {
		dir := filepath.Dir(p)
		st, err := os.Stat(filepath.Join(dir, "image", "checkpoint.img"))
		if err != nil || (best != nil && st.ModTime().Before(bestAt)) {
			continue
		}
		if sh, ok := readShape(dir); ok {
			best, bestAt = &checkpoint{dir: dir, shape: sh}, st.ModTime()
		}
	}
	return best
}

// readShape reads the shape.json saveShape wrote into dir.
func readShape(dir string) (shape, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, "shape.json"))
	var r shapeRecord
	if err != nil || json.Unmarshal(raw, &r) != nil {
		return shape{}, false
	}
	return shape{image: r.Image, dir: r.Dir, runtime: r.Runtime, ca: r.CA, netns: r.Netns, uid: r.UID, gid: r.GID,
		limits: r.Limits, egress: r.Egress, layout: r.Layout}, true
}

// reapRestored deletes, once per executor, the restored sandboxes an
// earlier process of this instance left (it was killed): none of them is
// a kernel this process holds.
func (e *Executor) reapRestored(ctx context.Context) {
	ckState.mu.Lock()
	done := ckState.reaped[e]
	ckState.reaped[e] = true
	ckState.mu.Unlock()
	root := restoredRoot()
	if done || !e.cfg.OwnKernel {
		return
	}
	if _, err := os.Stat(root); err != nil {
		return
	}
	rt, err := e.runscRuntime(ctx)
	if err != nil {
		return
	}
	out, err := exec.CommandContext(ctx, rt.path, "--root="+root, "list", "-quiet").Output()
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		if strings.HasPrefix(id, e.restoredPrefix()) {
			e.log.Warn("deleting a restored kernel sandbox an earlier process left", "sandbox", id)
			(&restoredBox{root: root, id: id}).delete(rt)
		}
	}
}

// runsc is the engine's registration of the runtime: its binary and the
// top-level flags every runsc call on its containers must repeat.
type runsc struct {
	path string
	args []string
}

func (e *Executor) runscRuntime(ctx context.Context) (runsc, error) {
	// The engine's registration does not change while it runs: asked
	// once, since the engine's answer (tens of ms on a loaded host) was
	// on the path of every resume.
	ckState.mu.Lock()
	rt, ok := ckState.runtimes[e]
	ckState.mu.Unlock()
	if ok {
		return rt, nil
	}
	rt, err := e.askRuntime(ctx)
	if err == nil {
		ckState.mu.Lock()
		ckState.runtimes[e] = rt
		ckState.mu.Unlock()
	}
	return rt, err
}

func (e *Executor) askRuntime(ctx context.Context) (runsc, error) {
	ictx, cancel := context.WithTimeout(ctx, e.cfg.PingTimeout)
	defer cancel()
	info, err := e.cli.Info(ictx, client.InfoOptions{})
	if err != nil {
		return runsc{}, fmt.Errorf("docker: engine info: %w", err)
	}
	rt, ok := info.Info.Runtimes[e.cfg.Runtime]
	if !ok || filepath.Base(rt.Path) != "runsc" {
		return runsc{}, fmt.Errorf("docker: runtime %q is not runsc", e.cfg.Runtime)
	}
	return runsc{path: rt.Path, args: rt.Args}, nil
}

// run runs one runsc command with state root root. stdio nil is
// /dev/null; stderr goes to the error.
func (r runsc) run(ctx context.Context, root string, stdio *[3]*os.File, args ...string) error {
	full := append([]string{"--root=" + root}, r.args...)
	cmd := exec.CommandContext(ctx, r.path, append(full, args...)...)
	// A pipe on a detached sandbox's stdio would keep Wait waiting for
	// the sandbox's end: files only (gvisor-checkpoint.md §6.1).
	errf, err := os.CreateTemp("", "sandgate-runsc-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(errf.Name())
	defer errf.Close()
	cmd.Stderr = errf
	if stdio != nil {
		cmd.Stdin, cmd.Stdout = stdio[0], stdio[1]
		if stdio[2] != nil {
			cmd.Stderr = stdio[2]
		}
	}
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(errf.Name())
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, lastLine(string(msg)))
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	const max = 300
	if len(s) > max {
		s = s[:max]
	}
	return s
}

// keepBundle writes a standalone copy of the sandbox's OCI bundle into
// dir: the spec runsc will restore, whose mount destinations must be the
// checkpointed ones (sources may differ).
func (e *Executor) keepBundle(ctx context.Context, rt runsc, root, id, dir string) error {
	var st struct {
		Bundle string `json:"bundle"`
	}
	out, err := exec.CommandContext(ctx, rt.path, "--root="+root, "state", id).Output()
	if err != nil {
		return fmt.Errorf("docker: runsc state of the kernel: %w", err)
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Bundle == "" {
		return fmt.Errorf("docker: runsc state of the kernel: no bundle (%v)", err)
	}
	raw, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return fmt.Errorf("docker: kernel bundle: %w", err)
	}
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("docker: kernel bundle: %w", err)
	}
	rootfs := e.exportedRoot()
	if rootfs == "" {
		return errors.New("docker: the image's exported runtime root is not there to restore on")
	}
	if err := standalone(spec, rootfs, dir); err != nil {
		return err
	}
	if err := carryCPULimit(st.Bundle, dir); err != nil { // checkpoint_cpu.go
		return fmt.Errorf("docker: kernel bundle: %w", err)
	}
	raw, err = json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o600)
}

// standalone makes an engine's bundle restorable without the engine:
// its hooks (the engine's network setup) and namespace paths go, its root
// is rootfs, its cgroup is its own (its CPU quota kept apart, see
// checkpoint_cpu.go), and each bind-mounted file (hosts,
// resolv.conf, hostname, which the engine deletes with the container) is
// copied into dir.
func standalone(spec map[string]any, rootfs, dir string) error {
	delete(spec, "hooks")
	if r, ok := spec["root"].(map[string]any); ok {
		r["path"] = rootfs
		r["readonly"] = true
	}
	if lx, ok := spec["linux"].(map[string]any); ok {
		// A cgroup of its own, so that the container's memory and pids
		// limits (linux.resources) bind the restored kernel too.
		lx["cgroupsPath"] = "/sandgate-restored/" + filepath.Base(dir)
		if nss, ok := lx["namespaces"].([]any); ok {
			kept := nss[:0]
			for _, n := range nss {
				if m, ok := n.(map[string]any); ok && m["path"] != nil && m["path"] != "" {
					continue
				}
				kept = append(kept, n)
			}
			lx["namespaces"] = kept
		}
	}
	if err := takeCPULimit(spec, dir); err != nil {
		return err
	}
	mounts, _ := spec["mounts"].([]any)
	for i, mv := range mounts {
		m, ok := mv.(map[string]any)
		if !ok || m["type"] != "bind" {
			continue
		}
		src, _ := m["source"].(string)
		st, err := os.Stat(src)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("docker: copy %s: %w", filepath.Base(src), err)
		}
		cp := filepath.Join(dir, fmt.Sprintf("file-%d-%s", i, filepath.Base(src)))
		if err := os.WriteFile(cp, data, 0o644); err != nil {
			return err
		}
		m["source"] = cp
	}
	return nil
}

// restoreKernel creates and restores ck's sandbox and returns it as a
// kernel whose driver is on the executor's pipes.
func (e *Executor) restoreKernel(ctx context.Context, session string, ck *checkpoint) (*dkernel, error) {
	k, err := e.restoreFrom(ctx, session, ck, filepath.Join(ck.dir, "image"), lazyPages)
	if err == nil {
		// The image is spent: a later pause writes a new one. Removed
		// off the resume's path (unlinking 40 MB is not free); the
		// restore read it whole (no --background).
		go func() { _ = os.RemoveAll(filepath.Join(ck.dir, "image")) }()
	}
	return k, err
}

// lazyPages lets runsc restore return once the kernel's state is back,
// its memory pages loading after (an uncompressed image only: a pause's
// or a fork's, not a named snapshot's). runsc hands the sandbox the
// image's files open, so removing them afterwards does not cut the load
// short.
const lazyPages = "-background"

// restoreFrom restores image with ck's bundle and shape; extra are more
// restore flags.
func (e *Executor) restoreFrom(ctx context.Context, session string, ck *checkpoint, image string, extra ...string) (*dkernel, error) {
	rt, err := e.runscRuntime(ctx)
	if err != nil {
		return nil, err
	}
	root := restoredRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	id := e.restoredPrefix() + randomID()
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(ck.dir, "driver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	began := time.Now()
	// One runsc call: restore creates the container it does not find
	// (as run does), so the sandbox takes the driver's stdio from it, and
	// the checkpointed process's stdin and stdout are rebound to them.
	// A create before it cost one more runsc process and state round
	// trip on every resume.
	args := append([]string{"restore", "-bundle", ck.dir, "-detach", "--image-path=" + image}, extra...)
	err = rt.run(rctx, root, &[3]*os.File{inR, outW, logf}, append(args, id)...)
	inR.Close()
	outW.Close()
	logf.Close()
	rb := &restoredBox{root: root, id: id, bundle: ck.dir}
	if err == nil {
		err = applyCPULimit(cgroupRoot, ck.dir) // checkpoint_cpu.go
	}
	if err != nil {
		inW.Close()
		outR.Close()
		rb.delete(rt)
		return nil, fmt.Errorf("docker: restore the kernel: %w", err)
	}
	b := &box{id: id, shape: ck.shape, exit: &exitWatch{done: make(chan struct{}), cancel: func() {}}}
	b.release = func() {
		inW.Close()
		outR.Close()
		ckState.mu.Lock()
		delete(ckState.restored, b)
		ckState.mu.Unlock()
		rb.delete(rt)
	}
	ckState.mu.Lock()
	ckState.restored[b] = rb
	ckState.mu.Unlock()
	e.log.Info("kernel restored", "session_id", session, "sandbox", id, "restore_ms", time.Since(began).Milliseconds())
	return &dkernel{b: b, conn: kernel.New(inW, outR)}, nil
}

// delete kills and deletes a restored sandbox and its bundle.
func (rb *restoredBox) delete(rt runsc) {
	ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
	defer cancel()
	_ = rt.run(ctx, rb.root, nil, "delete", "-force", rb.id)
	if rb.bundle != "" {
		removeSnapshot(rb.bundle)
	}
}

// removeSnapshot deletes a checkpoint's directory, and its session's
// and its instance's directories once they are empty.
func removeSnapshot(dir string) {
	_ = os.RemoveAll(dir)
	_ = os.Remove(filepath.Dir(dir))
	_ = os.Remove(filepath.Dir(filepath.Dir(dir)))
}

// RestoredSandboxes is how many kernels this executor restored outside
// the engine and still holds: the engine does not count them.
func (e *Executor) RestoredSandboxes() int {
	e.kernels.mu.Lock()
	defer e.kernels.mu.Unlock()
	ckState.mu.Lock()
	defer ckState.mu.Unlock()
	n := 0
	for _, k := range e.kernels.m {
		if ckState.restored[k.b] != nil {
			n++
		}
	}
	return n
}

func dirName(session string) string {
	sum := sha256.Sum256([]byte(session))
	return hex.EncodeToString(sum[:8])
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
