package subprocess

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/ownerdir"
)

// Isolation names what the executor can enforce on this host.
type Isolation string

const (
	// IsolationNamespaces: new PID, mount and network namespaces, the
	// minimal root (rootfs_linux.go) with a fresh /proc, the sandbox
	// uid/gid, rlimits, no_new_privs, own process group. Needs root
	// (CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID).
	IsolationNamespaces Isolation = "namespaces"
	// IsolationUserNS is the same for a gateway that is not root, through
	// unprivileged user namespaces: bubblewrap (Debian's bubblewrap, not
	// setuid) builds the same minimal root, PID and network namespaces,
	// and maps the sandbox uid/gid onto the gateway's own uid. What differs:
	// every session's runs are the gateway's uid on the host (RLIMIT_NPROC
	// is shared by all runs, and the per-session uid separation is only
	// inside the namespace), and there are no zygotes (a zygote forks runs
	// as another uid, which one mapped uid cannot give).
	IsolationUserNS Isolation = "userns"
	// IsolationNone: neither is possible here. The executor exists, so
	// /readyz and the policy input can say why, but Available fails with
	// the reason and nothing runs: a host process without namespaces
	// would see the host's files and network.
	IsolationNone Isolation = "none"
)

// chooseIsolation picks namespaces as root and user namespaces otherwise,
// and checks the choice with a probe through the real launch path. A
// failed probe leaves the executor unavailable with the reason, never in a
// weaker mode.
func (e *Executor) chooseIsolation(ctx context.Context) {
	e.dropUID = os.Geteuid() == 0
	var err error
	var reason string // short, for /readyz and the policy input
	if e.dropUID {
		e.isolation = IsolationNamespaces
		if e.unshare, err = e.lookPath(e.cfg.Unshare, DefaultToolPATH); err != nil {
			reason = "util-linux unshare not found"
		} else if err = e.probe(ctx); err != nil {
			reason = "namespace isolation probe failed"
		}
	} else {
		e.isolation = IsolationUserNS
		if e.bwrap, err = lookPath("/", e.cfg.Bwrap, DefaultToolPATH); err != nil {
			reason = "not root, and bubblewrap (needed for user namespaces) is not installed"
		} else if err = e.probe(ctx); err != nil {
			reason = "not root, and user namespaces are unavailable (bubblewrap failed)"
		}
	}
	if err != nil {
		e.log.Error("subprocess executor unavailable: no isolation", "tried", string(e.isolation), "reason", reason, "err", err)
		e.isolation, e.noIsolation, e.noIsolationReason = IsolationNone, fmt.Errorf("%s isolation: %w", e.isolation, err), reason
	}
}

// resolveRoot settles the system directories runs see: Config.RootDir
// (with its symlinks resolved once, so a rebuilt export is picked up only
// by a new executor) or the host's.
func (e *Executor) resolveRoot() error {
	e.sysRoot, e.rootID = "/", "host"
	if e.cfg.RootDir == "" {
		return nil
	}
	dir, err := filepath.EvalSymlinks(e.cfg.RootDir)
	if err != nil {
		return fmt.Errorf("root dir: %w", err)
	}
	if e.rootLock, err = lockShared(dir); err != nil {
		return fmt.Errorf("root dir: %w", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "usr")); err != nil || !fi.IsDir() {
		return fmt.Errorf("root dir %s: no usr directory: not a root filesystem", dir)
	}
	// The export's directory name (runtime-<recipe hash>) is the
	// identity the images carry in their sandgate.rootfs label. A rebuild
	// exports a new directory; this executor keeps the one it resolved
	// (a new one picks up the rebuild), and the shared lock tells
	// scripts/images.sh not to remove it while the executor lives.
	e.sysRoot = dir
	e.rootID = "rootfs:" + filepath.Base(dir)
	return nil
}

// lockShared takes a shared flock(2) on the directory dir and returns the
// descriptor that holds it (close-on-exec, so runs never inherit it).
// scripts/images.sh removes an old export only under an exclusive lock it
// gets without waiting, so an export some executor still uses survives a
// rebuild instead of vanishing under its runs.
func lockShared(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// RootID identifies the root filesystem runs see: "host", or the runtime
// root's identity.
func (e *Executor) RootID() string { return e.rootID }

// runDirPrefix names the executor's run directories in WarmDir.
const runDirPrefix = "sandgate-subprocess-"

// makeRunDir makes the executor's own directory (after removing those of
// gateways that died without Close): stage/, the mount point
// of every run's new root (each run mounts it in its own namespace, so
// one directory serves all), and probe/, the probe's workspace.
func (e *Executor) makeRunDir() error {
	dir, err := ownerdir.Make(e.cfg.WarmDir, runDirPrefix, 0o711)
	if err != nil {
		return fmt.Errorf("run dir: %w", err)
	}
	e.runDir, e.stage = dir, filepath.Join(dir, "stage")
	return errors.Join(os.Mkdir(e.stage, 0o700), os.Mkdir(filepath.Join(dir, "code"), 0o711),
		os.Mkdir(filepath.Join(dir, "probe"), 0o777), os.Chmod(filepath.Join(dir, "probe"), 0o777))
}

// codeDir is the host directory holding the program files of runs in
// workspace dir (one per workspace, so a warm interpreter or zygote started
// for the workspace sees the files written after it started). It lives in
// the executor's run directory, which Close removes.
func (e *Executor) codeDir(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(e.runDir, "code", hex.EncodeToString(sum[:8]))
}

// ensureCodeDir makes codeDir(dir) when it is missing, mode 0755 whatever
// the gateway's umask (runs read it). A run's path costs one mkdir(2)
// that finds it there; Close removes the run directory, so it is made
// again after Close.
func (e *Executor) ensureCodeDir(dir string) (string, error) {
	cd := e.codeDir(dir)
	err := os.Mkdir(cd, 0o755)
	if errors.Is(err, os.ErrNotExist) { // the run directory's code/ is gone
		err = os.MkdirAll(cd, 0o755)
	}
	switch {
	case err == nil:
		if err := os.Chmod(cd, 0o755); err != nil {
			return "", fmt.Errorf("code dir: %w", err)
		}
	case !errors.Is(err, os.ErrExist):
		return "", fmt.Errorf("code dir: %w", err)
	}
	return cd, nil
}

// writeCodeFile stores the program text for one run: the host path (for
// the caller to remove after the run) and the path the run sees. The
// directory is the gateway's (0755, root-owned as root): a run can read
// but not change it.
func (e *Executor) writeCodeFile(dir, id, lang, code string) (host, shown string, err error) {
	cd, err := e.ensureCodeDir(dir)
	if err != nil {
		return "", "", err
	}
	name := codePath(id, lang)
	host = filepath.Join(cd, name)
	f, err := os.OpenFile(host, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", "", fmt.Errorf("write code file: %w", err)
	}
	if _, err := f.WriteString(code); err != nil {
		f.Close()
		os.Remove(host)
		return "", "", fmt.Errorf("write code file: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(host)
		return "", "", fmt.Errorf("write code file: %w", err)
	}
	return host, path.Join(codeMount, name), nil
}

// rootFor is the minimal root of a run in workspace dir, in layout.
func (e *Executor) rootFor(dir string, layout executors.Layout) *rootPlan {
	if e.isolation != IsolationNamespaces && e.isolation != IsolationUserNS {
		return nil
	}
	code, _ := e.ensureCodeDir(dir) // a failure fails the run's bind: closed
	return &rootPlan{sys: e.sysRoot, workspace: dir, code: code, preload: e.nodeBoot.current(),
		tmpBytes: int64(e.cfg.TmpMB) << 20, layout: layout}
}

// lookPath resolves name in path inside the system root runs see.
func (e *Executor) lookPath(name, path string) (string, error) {
	return lookPath(e.sysRoot, name, path)
}

// checkExecutable checks p (a path inside the system root) as lookPath does.
func (e *Executor) checkExecutable(p string) error { return checkExecutable(e.sysRoot, p) }

// statInterp stats p inside the system root.
func (e *Executor) statInterp(p string) (os.FileInfo, error) { return statIn(e.sysRoot, p) }

// bwrapCommand is the user-namespace launch: the init shell sets the
// rlimits and execs bubblewrap, which builds the plan's root and runs argv
// as PID 1's child in new user, PID and (unless network) network
// namespaces. The kill of the process group reaches bwrap and its PID 1,
// whose death ends the namespace.
func (e *Executor) bwrapCommand(l launch) *exec.Cmd {
	args := []string{"-c", execScript, initArg0}
	args = append(args, l.limits.UlimitValues()...)
	args = append(args, e.bwrap, "--unshare-user", "--uid", strconv.Itoa(l.uid), "--gid", strconv.Itoa(l.gid),
		"--unshare-pid", "--unshare-uts", "--hostname", executors.Hostname, "--die-with-parent", "--unshare-net")
	root, mode := *l.root, "-"
	if l.bridge != nil && l.bridge.dir != "" {
		root.egress, mode = l.bridge.dir, "egress" // the socket bridge's directory holds the bundle too
	}
	args = append(args, root.bwrapArgs()...)
	args = append(args, "--", e.cfg.Shell, "-c", nprocScript, initArg0, l.limits.UlimitValues()[3], mode)
	args = append(args, l.argv...)
	cmd := exec.Command(e.cfg.Shell, args...)
	cmd.Args[0] = initArg0
	cmd.Dir = l.dir
	return cmd
}

// bwrapArgs describes the same root as build, in bubblewrap's terms.
func (p rootPlan) bwrapArgs() []string {
	var args []string
	expose := func(src, dst string) {
		fi, err := os.Lstat(src)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(src); err == nil {
				args = append(args, "--symlink", target, dst)
			}
		default:
			args = append(args, "--ro-bind", src, dst)
		}
	}
	for _, name := range p.entries() {
		if name == "etc" && p.sys == "/" {
			args = append(args, "--dir", "/etc")
			for _, n := range hostEtc {
				expose(filepath.Join("/etc", n), filepath.Join("/etc", n))
			}
			continue
		}
		expose(filepath.Join(p.sys, name), "/"+name)
	}
	args = append(args, "--bind", p.workspace, workspaceMount)
	if v := p.view(); v != "" {
		args = append(args, "--bind", v, p.layout.Root)
	}
	args = append(args,
		"--perms", "1777", "--size", strconv.FormatInt(p.tmpBytes, 10), "--tmpfs", "/tmp",
		"--dev", "/dev", "--proc", "/proc")
	if p.code != "" {
		args = append(args, "--ro-bind", p.code, codeMount)
	}
	if p.preload != "" {
		args = append(args, "--ro-bind", p.preload, preloadMount)
	}
	if p.egress != "" {
		args = append(args, "--ro-bind", p.egress, executors.EgressDir)
	}
	return append(args, "--chdir", p.layout.Dir(), "--remount-ro", "/")
}

// Where the executor's own files appear in a run's root.
const (
	codeMount    = executors.CodeDir    // program files
	preloadMount = "/run/sandgate/node" // the node preload
)
