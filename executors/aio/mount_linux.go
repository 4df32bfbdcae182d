package aio

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors/internal/wsfile"
)

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	point  string
	shared bool
}

// mountInfoPath is the calling thread's mount table, not the process's:
// /proc/self names the thread group leader, whose mount namespace need
// not be the one this thread's mount(2) calls act in. The subprocess
// executor builds each run's root on a locked thread that unshares its
// mount namespace and exits without unlocking; when that thread is the
// main one, Go parks it rather than ending it, and from then on
// /proc/self/mountinfo is that run's table. That is what made a restarted
// gateway see none of its state directory's mounts (issue 21's soak,
// gateway SIGKILL): it bound the state directory onto itself a second
// time, hiding the previous instance's workspace binds, and refused every
// instance it should have adopted.
const mountInfoPath = "/proc/thread-self/mountinfo"

// mounts reads the calling thread's mount table. The goroutine stays on
// one thread while it does, so the table read and the caller's mount(2)
// calls that follow on another thread agree as long as both are threads
// of the host namespace, which every thread but the subprocess executor's
// locked ones is.
func mounts() ([]mountEntry, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Open(mountInfoPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options optional... - type source super
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		e := mountEntry{point: unescapeMount(fields[4])}
		for _, opt := range fields[6:] {
			if opt == "-" {
				break
			}
			if strings.HasPrefix(opt, "shared:") {
				e.shared = true
			}
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMountPoint reports whether path is a mount point, and whether its
// topmost mount is shared.
func isMountPoint(path string) (mounted, shared bool, err error) {
	all, err := mounts()
	if err != nil {
		return false, false, err
	}
	for _, m := range all { // later lines are mounted on top
		if m.point == path {
			mounted, shared = true, m.shared
		}
	}
	return mounted, shared, nil
}

// ensureSharedMount makes dir a mount point with shared propagation (a
// bind mount onto itself when needed), so that a bind mount made under it
// later shows up in every container that mounted a directory below it with
// rslave propagation: how a session's workspace reaches an instance that
// was started before the session was known.
func ensureSharedMount(dir string) (made bool, err error) {
	mounted, shared, err := isMountPoint(dir)
	if err != nil {
		return false, err
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return false, fmt.Errorf("bind %s onto itself: %w", dir, err)
		}
		made = true
	}
	if !shared {
		if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
			if made {
				_ = unix.Unmount(dir, unix.MNT_DETACH)
			}
			return false, fmt.Errorf("make %s shared: %w", dir, err)
		}
	}
	return made, nil
}

// prepareWorkspace gives the workspace directory itself (not its content)
// to the run's uid, as the subprocess executor does, and makes sure its
// owner may enter it.
func prepareWorkspace(dir string, uid, gid int) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("workspace %q is not an absolute path", dir)
	}
	return wsfile.GiveDir(dir, uid, gid)
}
