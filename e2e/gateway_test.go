package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Switches that turn a skip into a failure; `make test` sets both.
const (
	requireNPMEnv    = "SANDGATE_REQUIRE_NPM_CLIENTS"
	requireDockerEnv = "SANDGATE_REQUIRE_DOCKER"
)

// readyTimeout bounds the wait for /readyz: the first probe of the Docker
// engine and the aio image can take a few seconds on a loaded machine.
const readyTimeout = 90 * time.Second

// skipOrFail skips the test, or fails it when the switch env is "1".
func skipOrFail(t *testing.T, env, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(env) == "1" {
		t.Fatalf("%s=1: %s", env, msg)
	}
	t.Skip(msg)
}

// The gateway binary is built once per test process, from this checkout,
// and removed by TestMain.
var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

func gatewayBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "sandgate-e2e-bin"); build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "gateway")
		args := []string{"build", "-o", build.bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/gateway")...)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/gateway: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

// gatewayProc is one gateway process with fixed tokens, a private data
// directory and an ephemeral loopback port.
type gatewayProc struct {
	base     string
	agent    string // the agent role's bearer token
	approver string // the approver role's
	logPath  string
}

var bannerRe = regexp.MustCompile(`^sandgate listening on (http://\S+)`)

// startGateway starts the gateway in mode with its default configuration
// otherwise (args may add flags, such as --config; the tests pass the
// configuration of sharedMachineConfig), waits until /readyz answers 200,
// and stops it (SIGTERM, so it removes its own containers) when the test
// ends.
func startGateway(t *testing.T, mode string, args ...string) *gatewayProc {
	t.Helper()
	bin := gatewayBinary(t)
	dir := t.TempDir()
	// The per-session sandbox uids must traverse down to their workspace.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	g := &gatewayProc{agent: randomToken(t), approver: randomToken(t), logPath: filepath.Join(dir, "gateway.log")}
	logf, err := os.Create(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logf.Close() })
	cmd := exec.Command(bin, append([]string{"--mode", mode, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")}, args...)...)
	cmd.Env = append(os.Environ(),
		"SANDGATE_AGENT_TOKEN="+g.agent,
		"SANDGATE_APPROVER_TOKEN="+g.approver,
		"SANDGATE_ADMIN_TOKEN="+randomToken(t))
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stopGateway(t, cmd, exited)
		b, _ := os.ReadFile(g.logPath)
		if i := bytes.Index(b, []byte("WARNING: DATA RACE")); i >= 0 {
			t.Errorf("the %s gateway reported a data race:\n%.6000s", mode, b[i:])
		}
	})
	if g.base, err = readBanner(stdout, exited); err != nil {
		t.Fatalf("%s gateway: %v\n%s", mode, err, g.logTail())
	}
	g.waitReady(t, exited)
	return g
}

// readBanner returns the base URL the gateway prints once it listens, and
// keeps draining stdout afterwards so the gateway never blocks on it.
func readBanner(stdout io.Reader, exited <-chan struct{}) (string, error) {
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := bannerRe.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case base := <-found:
		return base, nil
	case <-exited:
		return "", fmt.Errorf("exited before listening")
	case <-time.After(readyTimeout):
		return "", fmt.Errorf("no listening banner after %s", readyTimeout)
	}
}

// waitReady polls /readyz. An engine or image that never becomes usable
// skips the test (fails it under SANDGATE_REQUIRE_DOCKER=1): STRICT sends
// most of the client's commands to Docker.
func (g *gatewayProc) waitReady(t *testing.T, exited <-chan struct{}) {
	t.Helper()
	var status int
	var body string
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("gateway exited while waiting for /readyz\n%s", g.logTail())
		default:
		}
		if status, body = g.readyz(t.Context()); status == http.StatusOK {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	var r struct {
		Executors map[string]struct {
			Status string `json:"status"`
		} `json:"executors"`
	}
	if json.Unmarshal([]byte(body), &r) == nil && (r.Executors["docker"].Status != "ok" || r.Executors["aio"].Status != "ok") {
		skipOrFail(t, requireDockerEnv, "docker engine or images not usable (scripts/dockerd.sh start; make images): /readyz %d %s", status, body)
	}
	t.Fatalf("/readyz never answered 200: %d %s\n%s", status, body, g.logTail())
}

func (g *gatewayProc) readyz(ctx context.Context) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/readyz", nil)
	if err != nil {
		return 0, err.Error()
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	return res.StatusCode, string(b)
}

// logTail is the end of the gateway's log, for failure messages.
func (g *gatewayProc) logTail() string {
	b, err := os.ReadFile(g.logPath)
	if err != nil {
		return "(no gateway log: " + err.Error() + ")"
	}
	const max = 6000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "gateway log (tail):\n" + string(b)
}

func stopGateway(t *testing.T, cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Errorf("gateway did not stop within a minute of SIGTERM; killing it")
		_ = cmd.Process.Kill()
		<-exited
	}
}

func randomToken(t *testing.T) string {
	t.Helper()
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "e2e-" + hex.EncodeToString(b[:])
}
