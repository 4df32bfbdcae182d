package aio

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors/internal/wsmount"
)

// TestMountTableIsTheCallingThreads: the pool's mount checks read the
// mount table its own mount(2) calls act on. Issue 21's soak restarted the
// gateway after SIGKILL; the subprocess executor had parked the main
// thread in a run's mount namespace, so /proc/self/mountinfo no longer
// listed the state directory's mounts: the new gateway bound the state
// directory onto itself a second time (hiding the old instance's
// workspace binds, which then leaked) and adopted none of its instances.
// Here the mirror image: a thread in a mount namespace of its own, the
// main thread in the host's. ensureSharedMount called twice must leave one
// bind, and the check must see it.
func TestMountTableIsTheCallingThreads(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOrFail(t, "unsharing a mount namespace needs root")
	}
	dir := t.TempDir()
	type result struct {
		mounted, shared bool
		binds           int
		err             error
	}
	done := make(chan result, 1)
	offMainThread(func() {
		var r result
		defer func() { done <- r }()
		if r.err = unix.Unshare(unix.CLONE_NEWNS); r.err != nil {
			return
		}
		if r.err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); r.err != nil {
			return
		}
		for range 2 { // a gateway's start, then its restart's
			if _, r.err = ensureSharedMount(dir); r.err != nil {
				return
			}
		}
		if r.mounted, r.shared, r.err = isMountPoint(dir); r.err != nil {
			return
		}
		r.binds = countMountsAt(t, dir)
		_ = wsmount.UnmountAll(dir)
	})
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.mounted || !r.shared {
		t.Errorf("in the thread that mounted it: mounted %v shared %v, want both", r.mounted, r.shared)
	}
	if r.binds != 1 {
		t.Errorf("%d binds of the state directory after two starts, want 1 (a second one hides the first one's workspace binds)", r.binds)
	}
	if mounted, _, err := isMountPoint(dir); err != nil || mounted {
		t.Errorf("on a host thread: mounted %v (%v), want false: the bind lives in the other namespace", mounted, err)
	}
}

// offMainThread runs f on a locked thread other than the main one (whose
// mount table /proc/self shows), and lets that thread end with f: f may
// leave it in a namespace of its own. A goroutine that finds itself on
// the main thread holds it while it starts the next try, so that one
// lands elsewhere.
func offMainThread(f func()) {
	started := make(chan struct{})
	var try func()
	try = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			go try()
			<-started
			runtime.UnlockOSThread() // its namespace never changed
			return
		}
		close(started) // this thread is never unlocked: see above
		f()
	}
	go try()
	<-started
}

// countMountsAt counts the calling thread's mounts at path.
func countMountsAt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		t.Error(err)
		return -1
	}
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescapeMount(f[4]) == path {
			n++
		}
	}
	return n
}
