package subprocess

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// probeTimeout bounds the construction-time probe.
const probeTimeout = 10 * time.Second

// errProbe wraps every way the probe can find the isolation broken.
var errProbe = errors.New("isolation probe failed")

// probeScript prints, section by section, what the probe checks.
const probeScript = `echo "==limits"; cat /proc/self/limits
echo "==status"; cat /proc/self/status
echo "==netdev"; cat /proc/net/dev
echo "==init"; cat /proc/1/cmdline; echo
echo "==cwd"; pwd
echo "==host"; if [ -e "$1" ]; then echo present; else echo absent; fi`

// sections splits the probe's output at its "==name" lines.
func sections(out string) map[string]string {
	m := map[string]string{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(line, "=="); ok {
			cur = name
			continue
		}
		m[cur] += line + "\n"
	}
	return m
}

// probe runs a shell script through the real launch path with the default limits
// and checks, from inside, what the code would get: the rlimits (hard and
// soft, in the units the kernel reports, which also pins the shell's
// ulimit units), the uid/gid, no supplementary groups (as root), no
// capability, no_new_privs, a network namespace with only lo, a /proc whose
// PID 1 is the run's init, and the minimal root (cwd /workspace, the
// probe's host directory invisible). It fails closed: any mismatch is an error.
func (e *Executor) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	lim := e.cfg.Limits
	l := launch{
		// $1 is the probe's host directory: a host path that exists, and
		// that the minimal root must hide.
		argv:   []string{e.cfg.Shell, "-c", probeScript, "probe", filepath.Join(e.runDir, "probe")},
		limits: e.limitsFor("", lim),
		dir:    filepath.Join(e.runDir, "probe"),
		env:    e.env(executors.Layout{}),
		uid:    e.cfg.SandboxUID,
		gid:    e.cfg.SandboxGID,
	}
	l.root = e.rootFor(l.dir, executors.Layout{})
	cmd := e.command(l)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = e.cfg.KillGrace
	p, err := e.startLaunch(cmd, l)
	if err != nil {
		return fmt.Errorf("%w: start: %w", errProbe, err)
	}
	select {
	case <-p.exited:
	case <-ctx.Done():
		p.kill()
	}
	<-p.done
	if p.err != nil {
		return fmt.Errorf("%w: %w: %s", errProbe, p.err, strings.TrimSpace(stderr.String()))
	}
	if err := e.checkProbe(stdout.String()); err != nil {
		return fmt.Errorf("%w: %w", errProbe, err)
	}
	return nil
}

// checkProbe compares the probe's output with what the launch must give.
func (e *Executor) checkProbe(out string) error {
	sec := sections(out)
	lim := e.cfg.Limits
	want := map[string]int64{
		"Max cpu time":       int64(lim.CPUSeconds),
		"Max file size":      int64(lim.MaxFileSizeMB) << 20,
		"Max processes":      int64(lim.MaxProcs),
		"Max open files":     int64(lim.MaxOpenFiles),
		"Max address space":  int64(lim.MemoryMB) << 20,
		"Max core file size": 0,
	}
	var errs []error
	for name, v := range want {
		if err := checkLimit(sec["limits"], name, v); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, checkStatusField(sec["status"], "NoNewPrivs:", "1"),
		checkStatusField(sec["status"], "CapEff:", "0000000000000000"))
	if e.dropUID {
		errs = append(errs, checkStatusField(sec["status"], "Groups:", ""))
	}
	uid, gid := strconv.Itoa(e.cfg.SandboxUID), strconv.Itoa(e.cfg.SandboxGID)
	errs = append(errs, checkStatusField(sec["status"], "Uid:", strings.Repeat(uid+" ", 3)+uid),
		checkStatusField(sec["status"], "Gid:", strings.Repeat(gid+" ", 3)+gid),
		checkOnlyLoopback(sec["netdev"]))
	// PID 1 of the run's namespace: the init step, or bubblewrap's.
	init := initArg0 + "\x00"
	if e.isolation == IsolationUserNS {
		init = e.bwrap + "\x00"
	}
	if !strings.HasPrefix(sec["init"], init) {
		errs = append(errs, fmt.Errorf("/proc is not the run's own: PID 1 is %q", strings.ReplaceAll(sec["init"], "\x00", " ")))
	}
	if strings.TrimSpace(sec["cwd"]) != workspaceMount {
		errs = append(errs, fmt.Errorf("cwd %q, want %s: the minimal root is not in place", strings.TrimSpace(sec["cwd"]), workspaceMount))
	}
	if strings.TrimSpace(sec["host"]) != "absent" {
		errs = append(errs, errors.New("the host's paths are visible: the minimal root is not in place"))
	}
	return errors.Join(errs...)
}

// checkLimit finds the /proc/self/limits line for name and checks that the
// soft and hard values both equal want.
func checkLimit(out, name string, want int64) error {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 || f[0] != strconv.FormatInt(want, 10) || f[1] != f[0] {
			return fmt.Errorf("%s: got %q, want %d", name, strings.TrimSpace(rest), want)
		}
		return nil
	}
	return fmt.Errorf("%s: not reported", name)
}

// checkStatusField checks a /proc/self/status field, whitespace-normalised.
func checkStatusField(out, field, want string) error {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			if got := strings.Join(strings.Fields(v), " "); got != want {
				return fmt.Errorf("%s got %q, want %q", field, got, want)
			}
			return nil
		}
	}
	return fmt.Errorf("%s not reported", field)
}

// checkOnlyLoopback checks /proc/net/dev lists no interface but lo. Its
// first two lines are headers; every other line is "name: counters".
func checkOnlyLoopback(netdev string) error {
	lines := strings.Split(strings.TrimSpace(netdev), "\n")
	if len(lines) < 3 {
		return errors.New("/proc/net/dev: no interfaces listed")
	}
	for _, line := range lines[2:] {
		name, _, _ := strings.Cut(line, ":")
		if name = strings.TrimSpace(name); name != "lo" {
			return fmt.Errorf("network namespace has interface %q", name)
		}
	}
	return nil
}
