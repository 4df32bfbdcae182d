package aio

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/executors/internal/wsmount"
)

// sandboxdBin is the sandboxd binary built from this checkout for the
// tests (a local process for the client tests, the layer of the test
// image for the container tests).
var sandboxdBin string

func TestMain(m *testing.M) {
	// testcontainers' reaper image cannot be pulled here (DESIGN.md §8).
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	dir, err := os.MkdirTemp("", "aio-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sandboxdBin = filepath.Join(dir, "sandboxd")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s", "-o", sandboxdBin, "../../cmd/sandboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build sandboxd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	pruneTestImages()
	if code == 0 && leftoverContainers() > 0 {
		fmt.Fprintln(os.Stderr, "labelled aio test containers left behind")
		code = 1
	}
	os.Exit(code)
}

// pruneTestImages removes sandgate/aio-test tags older than an hour other
// than this run's: each change of sandboxd makes a new one, and each keeps
// its base image's layers alive. Younger ones may belong to a test process
// running now; an image a container uses is never removed by the engine.
func pruneTestImages() {
	cli, err := client.New(client.WithHostFromEnv())
	if err != nil {
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("reference", "sandgate/aio-test")})
	if err != nil {
		return
	}
	for _, img := range list.Items {
		if time.Since(time.Unix(img.Created, 0)) < time.Hour {
			continue
		}
		for _, tag := range img.RepoTags {
			if tag != imageRef {
				_, _ = cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{})
			}
		}
	}
}

// testInstancePrefix starts every pool instance name the tests use.
const testInstancePrefix = "aiotest"

// testRun labels the fixture containers of this test process, and
// testInstances holds the pool instance names it used: the final check
// looks for their leftovers only (other test processes may be running the
// same package on the same engine).
var (
	testRun       = executortest.Nonce()
	testInstances sync.Map
)

func leftoverContainers() int {
	cli, err := client.New(client.WithHostFromEnv())
	if err != nil {
		return 0
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", labelExecutor+"=aio")})
	if err != nil {
		return 0
	}
	n := 0
	for _, c := range list.Items {
		if _, ours := testInstances.Load(c.Labels[labelInstance]); ours || c.Labels["sandgate.test"] == testRun {
			fmt.Fprintf(os.Stderr, "left behind: %s %v\n", shortID(c.ID), c.Names)
			n++
		}
	}
	return n
}

// requireDocker returns an engine client, or skips the test when no
// engine answers, unless SANDGATE_REQUIRE_DOCKER=1 makes that a failure.
func requireDocker(t testing.TB) *client.Client {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		skipOrFail(t, "the AIO pool needs root on Linux (bind mounts under its state directory)")
	}
	cli, err := client.New(client.WithHostFromEnv())
	if err != nil {
		skipOrFail(t, "docker client: "+err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		_ = cli.Close()
		skipOrFail(t, "no Docker engine answers: "+err.Error())
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("SANDGATE_REQUIRE_DOCKER") == "1" {
		t.Fatal("SANDGATE_REQUIRE_DOCKER=1: " + why)
	}
	t.Skip(why)
}

// baseImage is the image make images builds from images/aio.
const baseImage = "sandgate/aio-base:latest"

var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
)

// testImage builds sandgate/aio:test-<hash> from the base image and the
// sandboxd of this checkout (images/aio/Dockerfile, the same layer
// images/aio/layer.sh makes), so the tests never run a stale agent.
func testImage(t testing.TB) string {
	t.Helper()
	cli := requireDocker(t)
	imageOnce.Do(func() { imageRef, imageErr = buildTestImage(cli) })
	if imageErr != nil {
		if strings.Contains(imageErr.Error(), "base image") {
			skipOrFail(t, imageErr.Error())
		}
		t.Fatal(imageErr)
	}
	return imageRef
}

func buildTestImage(*client.Client) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := os.ReadFile(sandboxdBin)
	if err != nil {
		return "", err
	}
	dockerfile, err := os.ReadFile("../../images/aio/Dockerfile")
	if err != nil {
		return "", err
	}
	return BuildImage(ctx, "", baseImage, "sandgate/aio-test", bin, dockerfile)
}

// newStateDir returns a short state directory (the socket path must fit
// 108 bytes) that is unmounted and removed after the test.
func newStateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sga")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = wsmount.UnmountAll(dir)
		if err := os.Remove(dir); err != nil {
			t.Errorf("state dir not empty after the test: %v", err)
		}
	})
	return dir
}

// newTestExecutor starts an executor with its own instance name and state
// directory, and checks at the end that it left no container behind.
func newTestExecutor(t testing.TB, mutate ...func(*PoolConfig)) *Executor {
	t.Helper()
	img := testImage(t)
	cfg := PoolConfig{
		Image:          img,
		Instance:       testInstancePrefix + executortest.Nonce(),
		StateDir:       newStateDir(t),
		IdleTimeout:    time.Minute,
		MaxInstances:   4,
		AcquireTimeout: 60 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(testOutput(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	testInstances.Store(cfg.Instance, true)
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	inst := cfg.Instance
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := countContainers(t, inst); n != 0 {
			t.Errorf("%d containers of instance %s left after Close", n, inst)
		}
	})
	return e
}

func testOutput(t testing.TB) io.Writer {
	if tt, ok := t.(*testing.T); ok {
		return tt.Output()
	}
	return os.Stderr
}

// countContainers counts the engine's containers of one pool instance.
func countContainers(t testing.TB, instance string) int {
	t.Helper()
	return len(listContainers(t, instance))
}

func listContainers(t testing.TB, instance string) []container.Summary {
	t.Helper()
	cli, err := client.New(client.WithHostFromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).
		Add("label", labelExecutor+"=aio").Add("label", labelInstance+"="+instance)})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// newWorkspace makes a session workspace under a 0711 parent, as the
// workspace package does.
func newWorkspace(t testing.TB) string {
	t.Helper()
	if tt, ok := t.(*testing.T); ok {
		return executortest.NewWorkspace(tt)
	}
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}
