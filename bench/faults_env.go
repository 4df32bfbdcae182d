package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// privateEngine is a second Docker engine of the fault soak's own, on its
// own socket, data root and exec root (scripts/dockerd.sh's
// SANDGATE_DOCKERD_* variables). The soak stops and starts it on purpose;
// the shared engine other tests and people use is never touched.
type privateEngine struct {
	state, sock, dataRoot, execRoot, log string
	holder                               int
}

func defaultPrivateEngine() privateEngine {
	return privateEngine{
		state:    "/run/sgsoak",
		sock:     "/run/sgsoak/docker.sock",
		dataRoot: "/var/lib/sgsoak-docker",
		execRoot: "/run/sgsoak/exec",
		log:      "/var/log/sgsoak-dockerd.log",
		holder:   os.Getpid(),
	}
}

func (e privateEngine) host() string { return "unix://" + e.sock }

// check refuses an engine whose paths are the shared engine's: restarting
// that one would pull it from under every other user of the machine.
func (e privateEngine) check() error {
	for _, p := range []string{e.sock, e.dataRoot, e.execRoot} {
		switch filepath.Clean(p) {
		case "/var/run/docker.sock", "/run/docker.sock", "/var/lib/docker", "/var/run/docker", "/run/docker":
			return fmt.Errorf("private engine path %s is the shared engine's", p)
		}
	}
	return nil
}

func (e privateEngine) script(ctx context.Context, verb string) (string, error) {
	cmd := exec.CommandContext(ctx, "./scripts/dockerd.sh", verb, fmt.Sprint(e.holder))
	cmd.Env = append(os.Environ(),
		"SANDGATE_DOCKERD_STATE="+e.state, "SANDGATE_DOCKERD_SOCK="+e.sock,
		"SANDGATE_DOCKERD_DATA_ROOT="+e.dataRoot, "SANDGATE_DOCKERD_EXEC_ROOT="+e.execRoot,
		"SANDGATE_DOCKERD_PIDFILE="+filepath.Join(e.state, "docker.pid"), "SANDGATE_DOCKERD_LOG="+e.log)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("dockerd.sh %s (private engine): %w: %s", verb, err, out)
	}
	return string(out), nil
}

func (e privateEngine) start(ctx context.Context) error {
	_, err := e.script(ctx, "start")
	return err
}

// stop stops the engine, and says so when dockerd.sh left it running.
func (e privateEngine) stop(ctx context.Context) error {
	out, err := e.script(ctx, "stop")
	if err == nil && e.ping() {
		return fmt.Errorf("the private engine still answers after dockerd.sh stop: %s", strings.TrimSpace(out))
	}
	return err
}

// dropLeases removes every lease on the private engine: the caller holds
// the soak's lock, so no one else may be using it, and a lease left by a
// killed soak (whose pid has been recycled) would keep stop from stopping.
func (e privateEngine) dropLeases() {
	ents, _ := os.ReadDir(filepath.Join(e.state, "leases"))
	for _, d := range ents {
		_ = os.Remove(filepath.Join(e.state, "leases", d.Name()))
	}
}

// ping reports whether the engine's API answers /_ping.
func (e privateEngine) ping() bool {
	c := http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", e.sock)
		}}}
	res, err := c.Get("http://docker/_ping")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == 200
}

// docker runs the docker CLI against the private engine.
func (e privateEngine) docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", append([]string{"-H", e.host()}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return "", fmt.Errorf("docker %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// ensureImages copies each image from the shared engine into the private
// one (docker save | docker load) unless it is there with the same id:
// the images are built once, by scripts/images.sh, on the shared engine.
func (e privateEngine) ensureImages(ctx context.Context, images []string) error {
	var missing []string
	for _, img := range images {
		want, err := exec.CommandContext(ctx, "docker", "image", "inspect", "-f", "{{.Id}}", img).Output()
		if err != nil {
			return fmt.Errorf("image %s on the shared engine (make images): %w", img, err)
		}
		have, _ := e.docker(ctx, "image", "inspect", "-f", "{{.Id}}", img)
		if have != strings.TrimSpace(string(want)) {
			missing = append(missing, img)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fmt.Printf("faults: copying %s into the private engine\n", strings.Join(missing, " "))
	sh := fmt.Sprintf("docker save %s | docker -H %s load", strings.Join(missing, " "), e.host())
	if out, err := exec.CommandContext(ctx, "sh", "-c", sh).CombinedOutput(); err != nil {
		return fmt.Errorf("copy images: %w: %s", err, out)
	}
	return nil
}

// layerAIO builds sandgate/aio in the private engine from the aio-base
// copied there and this checkout's sandboxd (images/aio/layer.sh, which
// builds nothing when its tag exists). Copying the shared engine's
// sandgate/aio instead would move its whole 1.3 GB every time sandboxd
// changes, where this adds one small layer.
func (e privateEngine) layerAIO(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "images/aio/layer.sh")
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+e.host())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("images/aio/layer.sh on the private engine: %w: %s", err, out)
	}
	return nil
}

// smallFS is a size-limited tmpfs, so that "disk full" is the kernel's
// ENOSPC and not a simulation. fill takes every free byte with one file;
// drain removes it.
type smallFS struct {
	dir    string
	filler string
}

func mountSmallFS(dir string, mib int) (smallFS, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return smallFS{}, err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%dm,mode=0711", mib)); err != nil {
		return smallFS{}, fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return smallFS{dir: dir, filler: filepath.Join(dir, "filler")}, nil
}

// fill writes zeros to the filler until the filesystem is full.
func (f smallFS) fill() error {
	fh, err := os.OpenFile(f.filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer fh.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := fh.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			return err
		}
	}
	// The last partial megabyte too.
	small := make([]byte, 4096)
	for {
		if _, err := fh.Write(small); err != nil {
			return nil
		}
	}
}

func (f smallFS) drain() error { return os.Remove(f.filler) }

func (f smallFS) unmount() { _ = syscall.Unmount(f.dir, syscall.MNT_DETACH) }

// privateRootBase holds the soak's own export of the runtime root.
const privateRootBase = "/var/lib/sgsoak-rootfs"

// privateRuntimeRoot exports the private engine's sandgate/runtime image
// as the subprocess executor's root (scripts/images.sh's extract, in Go),
// once per image: the shared export under /var/lib/sandgate/rootfs is
// replaced whenever someone on the machine builds another recipe, and a
// root that vanishes under the gateway would be a fault of nobody's
// schedule.
func (e privateEngine) privateRuntimeRoot(ctx context.Context) (string, error) {
	id, err := e.docker(ctx, "image", "inspect", "-f", "{{.Id}}", "sandgate/runtime:latest")
	if err != nil {
		return "", err
	}
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		id = id[:12]
	}
	dest := filepath.Join(privateRootBase, "runtime-"+id)
	if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
		return dest, nil
	}
	if err := os.MkdirAll(privateRootBase, 0o755); err != nil {
		return "", err
	}
	olds, _ := filepath.Glob(filepath.Join(privateRootBase, "*"))
	for _, o := range olds {
		_ = os.RemoveAll(o)
	}
	tmp, err := os.MkdirTemp(privateRootBase, ".export")
	if err != nil {
		return "", err
	}
	c, err := e.docker(ctx, "create", "--network", "none", "sandgate/runtime:latest", "/bin/true")
	if err != nil {
		return "", err
	}
	defer func() { _, _ = e.docker(context.Background(), "rm", c) }()
	sh := fmt.Sprintf("docker -H %s export %s | tar -C %s --numeric-owner -xpf -", e.host(), c, tmp)
	if out, err := exec.CommandContext(ctx, "sh", "-c", sh).CombinedOutput(); err != nil {
		return "", fmt.Errorf("export the runtime root: %w: %s", err, out)
	}
	for _, f := range []string{".dockerenv", "dev/console", "etc/hostname", "etc/hosts", "etc/resolv.conf"} {
		_ = os.Remove(filepath.Join(tmp, f))
	}
	etc := map[string]string{
		"etc/hostname":    "sandbox\n",
		"etc/hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/resolv.conf": "",
	}
	for f, body := range etc {
		if err := os.WriteFile(filepath.Join(tmp, f), []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	return dest, os.Rename(tmp, dest)
}
