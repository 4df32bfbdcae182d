package gvisor

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executors"
)

// TestLargeWritesArriveWhole: one large write to stdout arrives whole.
// gVisor completes a write to the container's host pipe only as far as the
// pipe has room; without the boot script's relay, python3 -u's print of
// 4 MiB delivered 64 KiB and the single os.write returned a short count.
func TestLargeWritesArriveWhole(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	const size = 4 << 20
	for name, code := range map[string]string{
		"print":    "print('x' * (4 << 20), end='')\n",
		"os.write": "import os, sys\nn = os.write(1, b'x' * (4 << 20))\nsys.stderr.write(str(n))\n",
	} {
		t.Run(name, func(t *testing.T) {
			s := spec(t, executors.LangPython, code)
			s.Limits.MaxOutputBytes = 8 << 20
			res := execute(t, e, s)
			if res.ExitCode != 0 || len(res.Stdout) != size || strings.Trim(res.Stdout, "x") != "" {
				t.Fatalf("exit %d, %d bytes of stdout (want %d), stderr %q", res.ExitCode, len(res.Stdout), size, res.Stderr)
			}
			if name == "os.write" && res.Stderr != "4194304" {
				t.Errorf("os.write returned %s, want the whole 4194304", res.Stderr)
			}
		})
	}
}

// TestLeftoverProcessesDoNotHoldTheRun: a program that exits leaving a
// detached child holding stdout still ends at once (the relays must not
// wait for that child), and the child's later output never arrives.
func TestLeftoverProcessesDoNotHoldTheRun(t *testing.T) {
	e := newTestExecutor(t, shippedWarmAfter)
	s := spec(t, executors.LangBash, "setsid sh -c 'sleep 5; echo late' &\necho done\n")
	res := execute(t, e, s)
	if res.ExitCode != 0 || res.TimedOut || res.Stdout != "done\n" || res.Duration.Seconds() >= 5 {
		t.Fatalf("result %+v", res)
	}
}
