package browser

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/internal/policytest"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/workspace"
)

// gatewayHelper is the test binary re-executed as a stand-in gateway: it
// starts a browser through a Manager, says so, and waits to be killed.
func gatewayHelper(dir string) {
	fail := func(err error) {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	ctx := context.Background()
	eng, err := policy.New(ctx, policy.Options{EvalTimeout: policytest.EvalTimeout})
	if err != nil {
		fail(err)
	}
	ws, err := workspace.New(filepath.Join(dir, "ws"), workspace.Options{})
	if err != nil {
		fail(err)
	}
	m, err := New(Config{DataDir: filepath.Join(dir, "b")}, Deps{Policy: eng, Audit: audit.NewMemory(), Workspaces: ws,
		Resolver: &noDNS{}})
	if err != nil {
		fail(err)
	}
	if _, err := m.Do(ctx, Request{RequestID: "req_helper", SessionID: "helper", Action: ActionNavigate,
		Params: []byte(`{"url":"about:blank"}`)}); err != nil {
		fail(err)
	}
	fmt.Println("READY")
	select {}
}

// The gateway dies without any chance to clean up (SIGKILL): its Chromium
// processes die with it (Pdeathsig on the browser, which its children and
// its crashpad handlers follow).
func TestNoChromiumOutlivesTheGateway(t *testing.T) {
	requireChromium(t)
	dir, err := os.MkdirTemp(testDataDir, "h-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDGATE_BROWSER_HELPER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "READY") || strings.HasPrefix(l, "ERR") {
				line <- l
				return
			}
		}
		line <- "EOF"
	}()
	select {
	case l := <-line:
		if l != "READY" {
			t.Fatalf("helper: %s", l)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("helper did not start a browser")
	}
	browsers := filepath.Join(dir, "b")
	if n := len(processesUnder(browsers)); n == 0 {
		t.Fatal("no Chromium process under the helper")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := processesUnder(browsers)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("%d Chromium processes outlived the killed gateway: %v", len(left), left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
