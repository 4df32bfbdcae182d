package subprocess

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// rootlessUser is the unprivileged account TestRootlessConformance runs
// the suite as; it is created when missing.
const rootlessUser = "sandgate-rootless"

// rootlessChildEnv marks the unprivileged re-run, which must not recurse.
const rootlessChildEnv = "SANDGATE_ROOTLESS_CHILD"

// TestRootlessConformance proves what a gateway that is not root gets: it
// runs this package's conformance suite again as an unprivileged user
// (created if missing, no supplementary groups), so the executor must
// reach the same environment through user namespaces. The zygote mode
// needs root and is skipped there; cold and warm must pass.
//
// The unprivileged run is a process of its own, started by TestMain
// (startRootless) so that it overlaps this package's other tests instead
// of following them: about 45 s alone, and this package is the last to
// finish in make test. It shares nothing with them: its own uid, user
// namespaces and temporary directory. The test waits for it here.
func TestRootlessConformance(t *testing.T) {
	if os.Getenv(rootlessChildEnv) != "" {
		t.Skip("this is the unprivileged run")
	}
	requireRoot(t)
	root := runtimeRoot(t)
	r := takeRootless()
	if r == nil { // not started by TestMain, or taken by an earlier -count
		r = startRootless()
	}
	defer r.stop()
	text, err := r.wait(t.Context())
	if err != nil {
		t.Fatalf("the suite as %s failed: %v\n%s", rootlessUser, err, tail(text, 400))
	}
	if root == "" {
		root = "/"
	}
	_, socatErr := lookPath(root, "socat", DefaultToolPATH)
	for _, mode := range []string{"cold", "warm"} {
		if !strings.Contains(text, "--- PASS: TestConformance/"+mode+" ") {
			t.Errorf("TestConformance/%s did not pass as %s:\n%s", mode, rootlessUser, tail(text, 400))
		}
		// With socat in the root the egress bridge works without root:
		// its cases must have run, not checked a refusal.
		ran := strings.Contains(text, "--- PASS: TestConformance/"+mode+"/Egress/bash/ca ")
		if socatErr == nil && !ran {
			t.Errorf("the egress cases did not run as %s (%s mode)", rootlessUser, mode)
		}
	}
}

// rootlessRun is one run of the conformance suite as rootlessUser: this
// test binary, copied where that user can execute it, under setpriv.
type rootlessRun struct {
	dir    string
	cancel context.CancelFunc
	done   chan struct{}
	out    []byte
	err    error
}

// started is the run TestMain started (nil: none, or taken).
var started struct {
	sync.Mutex
	run *rootlessRun
}

// takeRootless returns the run TestMain started, once.
func takeRootless() *rootlessRun {
	started.Lock()
	defer started.Unlock()
	r := started.run
	started.run = nil
	return r
}

// startRootless creates rootlessUser if missing and starts the suite as
// that user in the background. A set-up failure is the run's error.
func startRootless() *rootlessRun {
	r := &rootlessRun{done: make(chan struct{}), cancel: func() {}}
	if err := r.start(); err != nil {
		r.err = err
		close(r.done)
	}
	return r
}

func (r *rootlessRun) start() error {
	if _, err := exec.Command("id", "-u", rootlessUser).Output(); err != nil {
		out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--shell", "/usr/sbin/nologin", rootlessUser).CombinedOutput()
		if err != nil {
			return fmt.Errorf("useradd: %w: %s", err, out)
		}
	}
	dir, err := os.MkdirTemp("", "sandgate-rootless-")
	if err != nil {
		return err
	}
	r.dir = dir
	bin, tmp := filepath.Join(dir, "subprocess.test"), filepath.Join(dir, "tmp")
	err = errors.Join(os.Chmod(dir, 0o755), copyFile(os.Args[0], bin), os.Mkdir(tmp, 0o1777), os.Chmod(tmp, 0o1777))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	cmd := exec.CommandContext(ctx, "setpriv", "--reuid", rootlessUser, "--regid", rootlessUser,
		"--clear-groups", "--", bin, "-test.run", "^TestConformance$", "-test.v", "-test.count=1")
	cmd.Dir = tmp
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + tmp, rootlessChildEnv + "=1",
		"SANDGATE_RUNTIME_ROOT=" + os.Getenv("SANDGATE_RUNTIME_ROOT")}
	go func() {
		defer close(r.done)
		r.out, r.err = cmd.CombinedOutput()
	}()
	return nil
}

// wait returns the run's output and error once it has ended, or ctx's
// error.
func (r *rootlessRun) wait(ctx context.Context) (string, error) {
	select {
	case <-r.done:
		return string(r.out), r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop kills the run if it still goes, and removes its directory.
func (r *rootlessRun) stop() {
	r.cancel()
	<-r.done
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

// selected reports whether this test binary's -test.run and -test.skip
// select the top-level test name. A pattern it cannot read counts as
// selecting it: a run started in vain is only stopped at the end.
func selected(name string) bool {
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		return false
	}
	matches := func(flagName string) (matched, set bool) {
		f := flag.Lookup(flagName)
		if f == nil || f.Value.String() == "" {
			return false, false
		}
		top, _, _ := strings.Cut(f.Value.String(), "/")
		ok, err := regexp.MatchString(top, name)
		return ok || err != nil, true
	}
	if ok, set := matches("test.run"); set && !ok {
		return false
	}
	skip, _ := matches("test.skip")
	return !skip
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
