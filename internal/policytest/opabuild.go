package policytest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// opaBinary is the OPA CLI this module pins as a Go tool (go.mod's tool
// directive, the Makefile's `go tool opa`), resolved once per test
// binary: `go tool -n opa` builds it into the build cache if needed and
// prints its path, so each bundle is one exec of the cached binary.
var opaBinary = sync.OnceValues(func() (string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.Command(goCmd, "tool", "-n", "opa")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", &toolError{err: err, stderr: stderr.String()}
	}
	return strings.TrimSpace(string(out)), nil
})

type toolError struct {
	err    error
	stderr string
}

func (e *toolError) Error() string { return "go tool -n opa: " + e.err.Error() + ": " + e.stderr }

// OPABuild runs the OPA CLI's `opa build --bundle DIR --revision REV`,
// signed with `--signing-key` (a PEM private key, ES256) and the key id
// keyID when signingKey is not empty, and returns the .tar.gz. The CLI
// is required: a test that builds bundles fails when it cannot run it
// (it runs wherever Go does, from the module cache).
func OPABuild(t testing.TB, dir, revision, signingKey, keyID string) []byte {
	t.Helper()
	opa, err := opaBinary()
	if err != nil {
		t.Fatalf("the OPA CLI: %v", err)
	}
	tmp := t.TempDir()
	out := filepath.Join(tmp, "bundle.tar.gz")
	args := []string{"build", "--bundle", dir, "--revision", revision, "--output", out}
	if signingKey != "" {
		keyFile := filepath.Join(tmp, "signing.pem")
		if err := os.WriteFile(keyFile, []byte(signingKey), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--signing-key", keyFile, "--signing-alg", "ES256", "--verification-key-id", keyID)
	}
	cmd := exec.Command(opa, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opa %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
