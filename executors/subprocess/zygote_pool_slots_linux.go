package subprocess

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors/internal/wsmount"
)

// The slots of pooled zygotes (zygote_pool_idle.go). A pooled zygote is
// started before any session exists, so its root cannot hold a session's
// workspace: where a session zygote's root has the workspace (at
// /workspace and the layout's root) and its program directory (at
// codeMount), a pooled one has its slot's directories, rslave mounts of
// a shared tmpfs. A claim mounts the session's workspace and program
// directory onto the slot, and the kernel propagates both into every
// mount namespace of the zygote: its own, and those its spare run
// already made (zygoteBoot).
//
// The shared tmpfs exists only in a mount namespace of its own (slotNS),
// made by the executor and held by a descriptor and one thread: the host
// never sees a slot or a workspace mounted on one. So when the gateway
// dies, however it dies, nothing is left to reap: its zygotes die with it
// (Pdeathsig on their init step), the namespace with its last reference,
// and the host directory the tmpfs covers there is an empty directory of
// the run directory, which the next start removes (ownerdir).

// slotNS is the namespace of the slots and the thread that works in it.
type slotNS struct {
	dir  string // where the tmpfs is mounted, in the namespace only
	fd   int    // the namespace, for launch threads to clone slots from
	reqs chan func()
	done chan struct{}
	seq  atomic.Int64

	mu     sync.Mutex
	closed bool
	users  sync.WaitGroup // ops in flight, so close waits for them
}

// slotTmpfsBytes caps the slots' tmpfs: it holds only empty directories.
const slotTmpfsBytes = 64 << 10

// newSlotNS makes the namespace: a copy of the gateway's, every mount a
// slave (nothing mounted there reaches the host), with a shared tmpfs on
// dir (an existing empty host directory).
func newSlotNS(dir string) (*slotNS, error) {
	s := &slotNS{dir: dir, reqs: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go s.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return s, nil
}

func (s *slotNS) loop(ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread is the namespace's
	defer close(s.done)
	if err := s.build(); err != nil {
		ready <- fmt.Errorf("zygote slots: %w", err)
		return
	}
	ready <- nil
	for fn := range s.reqs {
		fn()
	}
	unix.Close(s.fd)
}

func (s *slotNS) build() error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave: %w", err)
	}
	if err := mountTmpfs(s.dir, slotTmpfsBytes, "711", unix.MS_NOEXEC); err != nil {
		return err
	}
	if err := unix.Mount("", s.dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make the slots shared: %w", err)
	}
	fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open namespace: %w", err)
	}
	s.fd = fd
	return nil
}

// do runs fn on the namespace's thread.
func (s *slotNS) do(fn func() error) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("zygote slots: closed")
	}
	s.users.Add(1)
	s.mu.Unlock()
	defer s.users.Done()
	errc := make(chan error, 1)
	s.reqs <- func() { errc <- fn() }
	return <-errc
}

// close ends the thread once the operations in flight are done; the
// namespace goes when its last zygote does.
func (s *slotNS) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.users.Wait()
	close(s.reqs)
	<-s.done
}

// zslot is one pooled zygote's slot: <dir>/<n>/ws and <n>/code.
type zslot struct {
	ns  *slotNS
	dir string
}

func (sl *zslot) ws() string   { return filepath.Join(sl.dir, "ws") }
func (sl *zslot) code() string { return filepath.Join(sl.dir, "code") }

// newSlot makes a slot of empty directories.
func (s *slotNS) newSlot() (*zslot, error) {
	sl := &zslot{ns: s, dir: filepath.Join(s.dir, strconv.FormatInt(s.seq.Add(1), 10))}
	err := s.do(func() error {
		return errors.Join(os.Mkdir(sl.dir, 0o711), os.Mkdir(sl.ws(), 0o755), os.Mkdir(sl.code(), 0o755))
	})
	if err != nil {
		sl.remove()
		return nil, fmt.Errorf("zygote slot: %w", err)
	}
	return sl, nil
}

// cloneInto adds the slot's trees for plan's root to t, as rslave
// clones: the workspace slot at /workspace (and again at the layout's
// root), the program slot read-only at codeMount. It runs on a launch
// thread (enterPrivateRoot), which it moves into the slot namespace: the
// caller setns's it into the base namespace next.
func (sl *zslot) cloneInto(t *runTrees, plan rootPlan) error {
	if err := unix.Setns(sl.ns.fd, unix.CLONE_NEWNS); err != nil {
		return rootErr("setns slots", err)
	}
	mounts := []struct {
		src, dst string
		ro       bool
	}{{sl.ws(), workspaceMount, false}, {sl.code(), codeMount, true}}
	if plan.layout.Root != "" {
		mounts = append(mounts, struct {
			src, dst string
			ro       bool
		}{sl.ws(), plan.layout.Root, false})
	}
	for _, m := range mounts {
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			return rootErr("clone slot "+m.src, err)
		}
		t.fds, t.dsts = append(t.fds, fd), append(t.dsts, m.dst)
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_SLAVE}
		if m.ro {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
			return rootErr("set attributes of slot "+m.src, err)
		}
	}
	return nil
}

// attach mounts the session's workspace and program directory (host
// paths) onto the slot. Both are cloned here, on a thread that sees the
// host, without following a symlink in their last component, and moved
// onto the slot from the namespace's thread.
func (sl *zslot) attach(workspace, code string) error {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, m := range []struct {
		src string
		ro  bool
	}{{workspace, false}, {code, true}} {
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			return fmt.Errorf("clone %s: %w", m.src, err)
		}
		fds = append(fds, fd)
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
		if m.ro {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
			return fmt.Errorf("set attributes of %s: %w", m.src, err)
		}
	}
	return sl.ns.do(func() error {
		for i, dst := range []string{sl.ws(), sl.code()} {
			if err := unix.MoveMount(fds[i], "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("mount onto the slot: %w", err)
			}
		}
		return nil
	})
}

// remove unmounts what a claim mounted on the slot and removes its
// directories. Nothing is ever removed recursively: a directory is
// removed only once nothing is mounted on it.
func (sl *zslot) remove() {
	_ = sl.ns.do(func() error {
		for _, d := range []string{sl.ws(), sl.code()} {
			if wsmount.UnmountAll(d) != nil {
				return nil
			}
			_ = unix.Rmdir(d)
		}
		_ = unix.Rmdir(sl.dir)
		return nil
	})
}
