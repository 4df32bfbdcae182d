package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/internal/policytest"
)

// testPolicyYAML is the policy section of the configuration of every
// gateway these tests start to serve requests: the evaluation budget of
// the in-process tests (policytest.EvalTimeout) instead of the shipped
// 500 ms, which a loaded machine (make test: -race, the fault soak, on 2
// cores) now and then exceeded, and the request was then denied
// policy.timeout (fail closed, right in production, and what the policy
// package's failclosed_test.go examines, not these tests).
var testPolicyYAML = "policy: {eval_timeout: " + policytest.EvalTimeout.String() + "}\n"

// gatewayBinary is the gateway built once per test binary for the tests
// that run it as a real process (crash, fleet, rootless), in a directory
// anyone may read and traverse (the rootless test runs it as another
// user). TestMain removes it.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	bin, err := builtGateway()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var builtGatewayDir string

var builtGateway = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sandgate-gateway-bin-")
	if err != nil {
		return "", err
	}
	builtGatewayDir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "gateway")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if builtGatewayDir != "" {
		_ = os.RemoveAll(builtGatewayDir)
	}
	os.Exit(code)
}
