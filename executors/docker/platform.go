package docker

import (
	"strings"
	"sync/atomic"
)

// defaultRunscPlatform is runsc's own default platform, in force when its
// registration names none.
const defaultRunscPlatform = "systrap"

// runtimePlatform is the platform a runtime with its own kernel runs on,
// read from the engine's registration of Config.Runtime (checkRuntime):
// gVisor's speed depends on it (systrap: 200k os.stat calls in 0.77 s,
// ptrace 8.9 s; kvm hangs on nested paravirtual KVM, issue 34), so an
// operator must be able to see which one is in use (Capabilities,
// /readyz). scripts/dockerd.sh registers it from SANDGATE_RUNSC_PLATFORM.
type runtimePlatform struct{ v atomic.Pointer[string] }

// set records the platform the runtime arguments args name.
func (p *runtimePlatform) set(args []string) {
	name := runscPlatform(args)
	p.v.Store(&name)
}

// get is the platform last seen, "" before the engine answered.
func (p *runtimePlatform) get() string {
	if v := p.v.Load(); v != nil {
		return *v
	}
	return ""
}

// runscPlatform is the --platform runsc's arguments name (the last one
// wins, as in runsc's flag parsing), or runsc's default.
func runscPlatform(args []string) string {
	name := defaultRunscPlatform
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--platform="), strings.HasPrefix(a, "-platform="):
			name = a[strings.Index(a, "=")+1:]
		case (a == "--platform" || a == "-platform") && i+1 < len(args):
			name = args[i+1]
		}
	}
	return name
}
