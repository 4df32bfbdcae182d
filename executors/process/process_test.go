package process

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/procfs"
)

func TestUlimitScript(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Rlimits
		want string
	}{
		{"none", Rlimits{}, ""},
		{"units", Rlimits{CPUSeconds: 5, AddressSpaceBytes: 64 << 20, OpenFiles: 32, FileSizeBytes: 1 << 20},
			"ulimit -t 5 && ulimit -v 65536 && ulimit -n 32 && ulimit -f 2048 && "},
		{"procs", Rlimits{Procs: 8}, "{ ulimit -p 8 2>/dev/null || ulimit -u 8; } && "},
		{"unlimited", Rlimits{CPUSeconds: Unlimited}, "ulimit -t unlimited && "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.UlimitScript(); got != tc.want {
				t.Errorf("UlimitScript() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestUlimitValues(t *testing.T) {
	got := Rlimits{CPUSeconds: 30, AddressSpaceBytes: 1 << 30, OpenFiles: 256, Procs: Unlimited, FileSizeBytes: 100 << 20}.UlimitValues()
	want := []string{"30", "1048576", "256", "unlimited", "204800"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("UlimitValues() = %v, want %v", got, want)
	}
}

// TestLimitsReachTheKernel: a shell that applies UlimitScript, and a
// process limited with Prlimit, report the same values in
// /proc/self/limits.
func TestLimitsReachTheKernel(t *testing.T) {
	r := Rlimits{CPUSeconds: 7, AddressSpaceBytes: 512 << 20, OpenFiles: 64, FileSizeBytes: 3 << 20}
	want := []string{"Max cpu time              7", "Max file size             3145728", "Max open files            64", "Max address space         536870912"}
	out, err := exec.Command("/bin/sh", "-c", r.UlimitScript()+"cat /proc/self/limits").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Errorf("ulimit: %q missing from\n%s", w, out)
		}
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := r.Prlimit(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	limits, err := os.ReadFile("/proc/" + itoa(cmd.Process.Pid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(string(limits), w) {
			t.Errorf("prlimit: %q missing from\n%s", w, limits)
		}
	}
}

// TestKillGroupAndExitCode: KillGroup kills a backgrounded child of the
// group too, and the leader's status maps to 128+9.
func TestKillGroupAndExitCode(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 30 & wait")
	cmd.SysProcAttr = groupAttr()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := KillGroup(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := AwaitExit(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got := ExitCode(cmd.ProcessState); got != 137 {
		t.Errorf("ExitCode = %d, want 137", got)
	}
	// A killed child is reparented and stays a zombie until its new parent
	// reaps it, which on a loaded machine can take seconds (CI 36): only
	// a member that still runs is a survivor.
	deadline := time.Now().Add(5 * time.Second)
	for liveInGroup(t, cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("the group's backgrounded child survived KillGroup")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// liveInGroup reports whether a process of group pgid has not exited.
func liveInGroup(t *testing.T, pgid int) bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := procfs.ReadStat(pid); err == nil && s.PGID == pgid && !s.Gone() {
			return true
		}
	}
	return false
}
