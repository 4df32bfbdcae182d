package subprocess

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors"
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
//	                             (unless the run's layout names another)
//	Layout.Root                  the same workspace again, when the run's
//	                             layout names one (/home/user,
//	                             /mnt/user-data): a second mount of the
//	                             same directory, over the runtime root's
//	                             empty directory (or one the base makes)
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
// With a runtime root, its /home /root /var /opt /srv /mnt /media /boot are
// bound read-only too (runtimeEntries), as a container on its image has
// them. The host's are never exposed: no host /home, /root, /var, data
// directory or /tmp.

// rootPlan says what one run's root holds. sys is the base's (one per
// executor); the rest is the run's.
type rootPlan struct {
	sys       string // directory whose system directories are exposed ("/" for the host's)
	workspace string // host path, bound read-write at /workspace
	code      string // host directory of the program files, bound read-only at codeMount
	preload   string // host directory bound read-only at preloadMount; "" for none
	egress    string // host directory bound read-only at executors.EgressDir (the CA bundle); "" for none
	layout    executors.Layout
	tmpBytes  int64
}

// sysEntries are the top-level names exposed from rootPlan.sys, as
// directories (bound read-only) or as symlinks (merged-/usr layouts).
var sysEntries = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"}

// runtimeEntries are the other top-level directories of a runtime root
// filesystem, bound read-only as well: a container on the same image has
// them (empty /home, root's /root, /var with /var/tmp not writable), and
// the code must see the same tree whichever backend runs it. The host's
// are never exposed.
var runtimeEntries = []string{"home", "root", "var", "opt", "srv", "mnt", "media", "boot"}

// entries are the top-level names exposed from p.sys.
func (p rootPlan) entries() []string {
	if p.sys == "/" {
		return sysEntries
	}
	return append(slices.Clone(sysEntries), runtimeEntries...)
}

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

// buildBase turns the calling thread's (already private) mount namespace
// into the part of every run's root that does not depend on the run: the
// system directories, /dev, and empty mount points for /workspace, /tmp,
// /proc and the executor's directories, using stage, an existing empty
// host directory, as the new root's mount point. It must run on a locked
// thread after unshare(CLONE_NEWNS|CLONE_FS). The namespace is then kept
// (baseNS) and each run copies it (enterRun), so a run pays a copy of a
// small namespace and a few mounts, not the host's namespace, the system
// binds and the detach of the old root.
func (p rootPlan) buildBase(stage string) error {
	// Nothing mounted from here on may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return rootErr("make / a slave", err)
	}
	if err := mountTmpfs(stage, rootBaseBytes, "755", 0); err != nil {
		return err
	}
	for _, step := range []func(string) error{p.bindSystem, buildDev, p.mkMountPoints} {
		if err := step(stage); err != nil {
			return err
		}
	}
	if err := enterRoot(stage); err != nil {
		return err
	}
	// Private, so that what a run mounts in its copy never propagates to
	// the base or to another run's copy.
	return rootErr("make / private", unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
}

// runTrees are the run's own directories as detached mounts
// (open_tree(2) clones), taken while the thread still sees the host: after
// setns into the base namespace no host path resolves, but a detached
// mount can be attached there (move_mount(2)).
type runTrees struct {
	fds  []int
	dsts []string
}

// cloneTrees clones the workspace (read-write) and the executor's
// directories (read-only), all nosuid and nodev. The last component is
// never followed if it is a symlink.
func (p rootPlan) cloneTrees() (*runTrees, error) {
	t := &runTrees{}
	for _, m := range []struct {
		src, dst string
		ro       bool
	}{{p.workspace, workspaceMount, false}, {p.view(), p.layout.Root, false}, {p.code, codeMount, true},
		{p.preload, preloadMount, true}, {p.egress, executors.EgressDir, true}} {
		if m.src == "" {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			t.close()
			return nil, rootErr("clone "+m.src, err)
		}
		t.fds, t.dsts = append(t.fds, fd), append(t.dsts, m.dst)
		// Private: a clone of a shared host mount would otherwise stay its
		// peer, and a pooled zygote's namespace keeps propagation.
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
		if m.ro {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
			t.close()
			return nil, rootErr("set attributes of "+m.src, err)
		}
	}
	return t, nil
}

func (t *runTrees) close() {
	for _, fd := range t.fds {
		unix.Close(fd)
	}
	t.fds = nil
}

// enterRun finishes a run's root in the calling thread's private copy of
// the base namespace: the run's trees attached, a fresh /tmp, and the cwd
// the layout's (/workspace by default).
func (p rootPlan) enterRun(t *runTrees) error {
	for i, fd := range t.fds {
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, t.dsts[i], unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return rootErr("attach "+t.dsts[i], err)
		}
	}
	if err := mountTmpfs("/tmp", p.tmpBytes, "1777", 0); err != nil {
		return err
	}
	return rootErr("chdir "+p.layout.Dir(), unix.Chdir(p.layout.Dir()))
}

// view is the workspace again when the layout names a root, "" without.
func (p rootPlan) view() string {
	if p.layout.Root == "" {
		return ""
	}
	return p.workspace
}

// mkMountPoints makes the directories a run mounts over: its own, and
// the layout roots whose top directory the root does not take from the
// runtime root (whose image has them: images/runtime/trim.sh).
func (p rootPlan) mkMountPoints(stage string) error {
	dirs := []string{"workspace", "tmp", codeMount, preloadMount, executors.EgressDir}
	for _, r := range executors.LayoutRoots {
		top, _, _ := strings.Cut(strings.TrimPrefix(r, "/"), "/")
		if !slices.Contains(p.entries(), top) {
			dirs = append(dirs, r)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			return rootErr("mkdir "+d, err)
		}
	}
	return rootErr("mkdir proc", os.Mkdir(filepath.Join(stage, "proc"), 0o555))
}

func (p rootPlan) bindSystem(stage string) error {
	for _, name := range p.entries() {
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
// reachable and makes the root itself read-only.
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
	return rootErr("remount / read-only", unix.Mount("", "/", "",
		unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""))
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
