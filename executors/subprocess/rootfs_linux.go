package subprocess

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The minimal root every run of this executor sees (DESIGN.md §6), built
// the way bubblewrap builds one: in a mount namespace of the run's own, a
// tmpfs becomes the new root, the system directories are bound into it
// read-only, the session workspace read-write at /workspace, and the old
// root is detached, so no other host path exists for the run at all.
//
//	/usr /bin /sbin /lib* /etc   read-only, from rootPlan.sys (the runtime
//	                             root filesystem, or the host's system
//	                             directories when none is configured; then
//	                             only the /etc entries in hostEtc)
//	/workspace                   the session workspace, read-write, the cwd
//	/tmp                         a tmpfs of rootPlan.tmpBytes, mode 1777
//	/dev                         null zero full random urandom tty, fd and
//	                             std* links, a small /dev/shm
//	/proc                        empty: the run mounts its own (fresh PID
//	                             namespace) in the launch chain
//	/run/sandgate/code           the program files of the workspace's runs,
//	                             read-only (kept out of /workspace, where
//	                             an agent's ls or grep would find them)
//	/run/sandgate/node           the node preload directory, read-only
//	/                            the tmpfs itself, remounted read-only
//
// No /home, /root, /var, /srv, /mnt, /opt, data directory or host /tmp.

// rootPlan says what one run's root holds.
type rootPlan struct {
	sys       string // directory whose system directories are exposed ("/" for the host's)
	workspace string // host path, bound read-write at /workspace
	code      string // host directory of the program files, bound read-only at codeMount
	preload   string // host directory bound read-only at preloadMount; "" for none
	tmpBytes  int64
}

// sysEntries are the top-level names exposed from rootPlan.sys, as
// directories (bound read-only) or as symlinks (merged-/usr layouts).
var sysEntries = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"}

// hostEtc are the /etc entries a run gets when the root is the host's:
// what the dynamic linker, the interpreters, name lookups and TLS need,
// and nothing that is host configuration (tokens, keys, service config).
// With a runtime root filesystem, its whole /etc is used: it is ours.
var hostEtc = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives",
	"passwd", "group", "nsswitch.conf", "hosts", "host.conf", "localtime", "timezone",
	"ssl", "ca-certificates", "ca-certificates.conf", "mime.types",
	"python3", "python3.11", "python3.12", "python3.13", "matplotlibrc", "fonts", "gitconfig",
	"inputrc", "bash.bashrc", "profile", "debian_version", "os-release",
}

// devNodes are bound from the host's /dev; a tmpfs /dev with bind-mounted
// nodes works without CAP_MKNOD and keeps nodev off only where needed.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

const (
	// rootDevBytes and rootShmBytes cap /dev itself and /dev/shm (python's
	// multiprocessing semaphores live there).
	rootDevBytes = 64 << 10
	rootShmBytes = 64 << 20
	// rootBaseBytes caps the root tmpfs: it only holds mount points.
	rootBaseBytes = 1 << 20
)

// errRootBuild wraps every failure of build; the run then fails closed.
var errRootBuild = errors.New("minimal root")

// build turns the calling thread's (already private) mount namespace into
// the run's root, using stage, an existing empty host directory, as the
// mount point of the new root. It must run on a locked thread after
// unshare(CLONE_NEWNS|CLONE_FS); on return the thread's root and cwd are
// the new root's /workspace.
func (p rootPlan) build(stage string) error {
	// Nothing mounted from here on may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return rootErr("make / a slave", err)
	}
	if err := mountTmpfs(stage, rootBaseBytes, "755", 0); err != nil {
		return err
	}
	steps := []func(string) error{p.bindSystem, p.bindWorkspace, p.mountTmp, buildDev, p.bindPreload, mkProc}
	for _, step := range steps {
		if err := step(stage); err != nil {
			return err
		}
	}
	return enterRoot(stage)
}

func (p rootPlan) bindSystem(stage string) error {
	for _, name := range sysEntries {
		src := filepath.Join(p.sys, name)
		if name == "etc" && p.sys == "/" {
			if err := bindHostEtc(stage); err != nil {
				return err
			}
			continue
		}
		if err := exposeEntry(src, filepath.Join(stage, name)); err != nil {
			return err
		}
	}
	return nil
}

// exposeEntry replicates src at dst: a symlink as the same symlink, a
// directory or file bound read-only. A missing src is skipped.
func exposeEntry(src, dst string) error {
	fi, err := os.Lstat(src)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return rootErr("stat "+src, err)
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return rootErr("readlink "+src, err)
		}
		return rootErr("symlink "+dst, os.Symlink(target, dst))
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			return rootErr("mkdir "+dst, err)
		}
	default:
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return rootErr("create "+dst, err)
		}
	}
	return bindReadOnly(src, dst)
}

func bindHostEtc(stage string) error {
	etc := filepath.Join(stage, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return rootErr("mkdir "+etc, err)
	}
	for _, name := range hostEtc {
		if err := exposeEntry(filepath.Join("/etc", name), filepath.Join(etc, name)); err != nil {
			return err
		}
	}
	return nil
}

func (p rootPlan) bindWorkspace(stage string) error {
	dst := filepath.Join(stage, "workspace")
	if err := os.Mkdir(dst, 0o755); err != nil {
		return rootErr("mkdir "+dst, err)
	}
	if err := unix.Mount(p.workspace, dst, "", unix.MS_BIND, ""); err != nil {
		return rootErr("bind workspace", err)
	}
	return rootErr("remount workspace", unix.Mount("", dst, "",
		unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""))
}

func (p rootPlan) mountTmp(stage string) error {
	dst := filepath.Join(stage, "tmp")
	if err := os.Mkdir(dst, 0o755); err != nil {
		return rootErr("mkdir "+dst, err)
	}
	return mountTmpfs(dst, p.tmpBytes, "1777", 0)
}

func (p rootPlan) bindPreload(stage string) error {
	for _, m := range []struct{ src, dst string }{{p.code, codeMount}, {p.preload, preloadMount}} {
		if m.src == "" {
			continue
		}
		dst := filepath.Join(stage, m.dst)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return rootErr("mkdir "+dst, err)
		}
		if err := bindReadOnly(m.src, dst); err != nil {
			return err
		}
	}
	return nil
}

func mkProc(stage string) error {
	return rootErr("mkdir proc", os.Mkdir(filepath.Join(stage, "proc"), 0o555))
}

func buildDev(stage string) error {
	dev := filepath.Join(stage, "dev")
	if err := os.Mkdir(dev, 0o755); err != nil {
		return rootErr("mkdir "+dev, err)
	}
	if err := mountTmpfs(dev, rootDevBytes, "755", unix.MS_NOEXEC); err != nil {
		return err
	}
	for _, n := range devNodes {
		if err := exposeDevNode(filepath.Join("/dev", n), filepath.Join(dev, n)); err != nil {
			return err
		}
	}
	links := map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return rootErr("symlink /dev/"+name, err)
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		return rootErr("mkdir /dev/shm", err)
	}
	return mountTmpfs(shm, rootShmBytes, "1777", unix.MS_NOEXEC)
}

// exposeDevNode binds a host device node; read-only does not apply (the
// nodes must stay writable) but nosuid and noexec do.
func exposeDevNode(src, dst string) error {
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.WriteFile(dst, nil, 0o666); err != nil {
		return rootErr("create "+dst, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return rootErr("bind "+src, err)
	}
	return rootErr("remount "+dst, unix.Mount("", dst, "",
		unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NOEXEC, ""))
}

// enterRoot pivots into stage, detaches the old root so no host path is
// reachable, makes the root itself read-only and moves to /workspace.
func enterRoot(stage string) error {
	old := filepath.Join(stage, ".old")
	if err := os.Mkdir(old, 0o700); err != nil {
		return rootErr("mkdir old root", err)
	}
	if err := unix.PivotRoot(stage, old); err != nil {
		return rootErr("pivot_root", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return rootErr("chdir /", err)
	}
	if err := unix.Unmount("/.old", unix.MNT_DETACH); err != nil {
		return rootErr("detach old root", err)
	}
	if err := os.Remove("/.old"); err != nil {
		return rootErr("remove old root", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return rootErr("remount / read-only", err)
	}
	return rootErr("chdir /workspace", unix.Chdir("/workspace"))
}

func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return rootErr("bind "+src, err)
	}
	return rootErr("remount "+dst+" read-only", unix.Mount("", dst, "",
		unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""))
}

// mountTmpfs mounts a size-capped tmpfs; mode is octal, as mount(8) takes it.
func mountTmpfs(dst string, size int64, mode string, extra uintptr) error {
	data := "size=" + strconv.FormatInt(size, 10) + ",mode=" + mode
	return rootErr("tmpfs "+dst, unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|extra, data))
}

func rootErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", errRootBuild, what, err)
}
