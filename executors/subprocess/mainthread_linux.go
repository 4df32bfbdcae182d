package subprocess

import "runtime"

// init keeps the main thread to the main goroutine for the whole program
// (the documented effect of LockOSThread in an init function). The
// executor builds roots, run namespaces and egress bridges on goroutines
// that lock their thread, enter other namespaces and exit locked, so that
// the runtime destroys the thread instead of reusing it. The main thread
// cannot be destroyed: the runtime parks it, still in the run's
// namespaces, and /proc/self (the main thread's view, which every part of
// the gateway reads: mount tables, namespaces) would show a run's. With
// the main thread taken, those goroutines never land on it.
func init() {
	runtime.LockOSThread()
}
