package executortest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// NewMarkers returns n unique sleep durations ("1000.<digits>"). A marker
// is found in a process's cmdline whatever PID namespace it runs in, and
// is harmless as an argument to sleep(1).
func NewMarkers(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("1000.%09d%d", rand.IntN(1e9), i)
	}
	return out
}

// ProcessesMatching returns the pids of live processes whose cmdline (as
// this host's /proc shows it) contains marker. Zombies have an empty
// cmdline and so never match.
func ProcessesMatching(marker string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// markerWatch polls /proc in the background and records which markers
// were seen alive.
type markerWatch struct {
	markers []string
	mu      sync.Mutex
	seen    map[string]bool
	done    chan struct{}
	wg      sync.WaitGroup
}

func watchMarkers(markers []string) *markerWatch {
	w := &markerWatch{markers: markers, seen: map[string]bool{}, done: make(chan struct{})}
	w.wg.Go(w.loop)
	return w
}

func (w *markerWatch) loop() {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, m := range w.markers {
			if len(ProcessesMatching(m)) > 0 {
				w.mu.Lock()
				w.seen[m] = true
				w.mu.Unlock()
			}
		}
		select {
		case <-w.done:
			return
		case <-tick.C:
		}
	}
}

// waitAll waits until every marker was seen, or the timeout.
func (w *markerWatch) waitAll(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		n := len(w.seen)
		w.mu.Unlock()
		if n == len(w.markers) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// WatchMarkers runs f while polling for the marked processes, and returns
// which markers were seen alive meanwhile: an executor's own tests use it
// to prove that the processes a kill check looks for existed at all.
func WatchMarkers(markers []string, f func()) map[string]bool {
	w := watchMarkers(markers)
	f()
	return w.stop()
}

// stop ends the watch and returns what was seen.
func (w *markerWatch) stop() map[string]bool {
	close(w.done)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// WaitMarkersGone waits up to grace for every marked process to be gone
// and returns the pids of those still alive.
func WaitMarkersGone(markers []string, grace time.Duration) map[string][]int {
	deadline := time.Now().Add(grace)
	for {
		left := map[string][]int{}
		for _, m := range markers {
			if pids := ProcessesMatching(m); len(pids) > 0 {
				left[m] = pids
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killMarked SIGKILLs every process carrying one of the markers: the
// test's own leftovers when a backend declared DetachedEscape.
func killMarked(markers []string) {
	for _, m := range markers {
		for _, pid := range ProcessesMatching(m) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
