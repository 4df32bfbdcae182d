package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStartTrapped: a child stopped at its exec gets what set gives it
// before it runs anything, and then runs untraced, with no signal left
// pending: its own ptrace works, and it exits as it would have.
func TestStartTrapped(t *testing.T) {
	cases := []struct {
		name   string
		script string
		want   string
	}{
		{name: "the limit is there from the first instruction", script: "ulimit -t", want: "7"},
		{name: "not traced once running", script: "grep TracerPid /proc/self/status", want: "TracerPid:\t0"},
		{name: "no signal pending", script: "grep -E 'SigPnd|ShdPnd' /proc/self/status | tr -d '\\t'", want: "SigPnd:0000000000000000\nShdPnd:0000000000000000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", tc.script)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			set := func(pid int) error {
				return unix.Prlimit(pid, unix.RLIMIT_CPU, &unix.Rlimit{Cur: 7, Max: 7}, nil)
			}
			if err := startTrapped(cmd, set); err != nil {
				t.Skipf("ptrace refused here: %v", err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("wait: %v: %s", err, out.String())
			}
			if got := strings.TrimSpace(out.String()); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStartTrappedSetFails: when the limits cannot be set, the child never
// runs: it is killed at its exec stop and reaped.
func TestStartTrappedSetFails(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", "touch ran")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err := startTrapped(cmd, func(int) error { return unix.EINVAL })
	if err == nil {
		t.Fatal("startTrapped succeeded though set failed")
	}
	if cmd.ProcessState == nil {
		t.Errorf("the child was not reaped: %v", err)
	}
	if _, statErr := exec.Command("test", "-e", dir+"/ran").Output(); statErr == nil {
		t.Errorf("the child ran before its limits were set")
	}
}

// TestExecTrapProbe: on a machine that allows ptrace (this one, and the
// aio image's containers under Docker's default seccomp profile) the probe
// finds that it works, and the gateway's runs, programs run from their
// files, then get their limits at the exec: there from the start, and the
// program untraced.
func TestExecTrapProbe(t *testing.T) {
	ts := newTestServer(t, func(c *config) { c.CodeDir = t.TempDir() })
	for deadline := time.Now().Add(10 * time.Second); ts.srv.jobs.trap.state.Load() == trapUnknown; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the probe did not finish in 10 s")
		}
	}
	if !ts.srv.jobs.trap.works() {
		t.Fatal("the probe found ptrace refused on a machine that allows it")
	}
	cases := []struct{ lang, code, want string }{
		{"python", "import resource as r\nprint(r.getrlimit(r.RLIMIT_AS)[0])\n" +
			"print([l for l in open('/proc/self/status') if l.startswith('TracerPid')][0].split()[1])", "100663296\n0\n"},
		{"bash", "ulimit -v; grep TracerPid /proc/self/status | cut -f2", "98304\n0\n"},
	}
	for i, tc := range cases {
		path := "/v1/code/execute"
		body := map[string]any{"language": tc.lang, "code": tc.code}
		if tc.lang == "bash" {
			path, body = "/v1/bash/exec", map[string]any{"command": tc.code}
		}
		body["x_sandgate"] = map[string]any{"program": fmt.Sprintf("req-trap-%d", i), "limits": map[string]any{"memory_mb": 96}}
		d := ts.post(path, body).envelope(t, true)
		if d["stdout"] != tc.want {
			t.Errorf("%s: stdout %q, want %q (stderr %v)", tc.lang, d["stdout"], tc.want, d["stderr"])
		}
	}
}
