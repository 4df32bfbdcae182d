// Command k8s-pause is the pod sandbox ("pause") image of the test cluster
// that scripts/k8s.sh starts (issue 29): there is no registry to pull the
// upstream one from, so it is built here, static, and imported into the
// cluster's containerd (scripts/k8s-images.sh).
//
// It holds the pod's namespaces and, as PID 1 of a pod with
// shareProcessNamespace (every sandbox pod of executors/k8s), reaps the
// orphans that user code leaves: a sandbox serves many runs, and without
// an init its zombies would pile up against the pod's pids limit.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
