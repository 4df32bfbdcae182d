package docker

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startProcServer runs the process server on the host in a fresh slot's
// ctl directory and returns its socket once it listens. It needs root
// (the server changes identity) and python3.
func startProcServer(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this host")
	}
	if os.Geteuid() != 0 {
		t.Skip("the process server changes identity: needs root")
	}
	slot, err := os.MkdirTemp("", "procserver-slot-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCtl(slot); _ = os.Remove(slot) })
	if err := os.Chmod(slot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := makeCtl(slot); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-I", "-S", "-c", procServerPython, slotCtl(slot))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "FROM_CONTAINER=1", "HOME=/"}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != procServerReady+"\n" {
		t.Fatalf("server did not start: %q %v; stderr %s", line, err, errb.String())
	}
	return procServerSocket(slot)
}

// runSpawned spawns req on sock with stdin, and returns its stdout,
// stderr and exit code.
func runSpawned(t *testing.T, sock string, req spawnRequest, stdin string) (string, string, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	p, err := spawn(ctx, sock, req)
	if err != nil {
		return "", "", 0, err
	}
	defer p.close()
	go func() {
		_, _ = io.WriteString(p.stdin, stdin)
		_ = p.stdin.Close()
	}()
	errc := make(chan string, 1)
	go func() { b, _ := io.ReadAll(p.stderr); errc <- string(b) }()
	o, _ := io.ReadAll(p.stdout)
	e := <-errc
	code, err := p.wait()
	return string(o), e, code, err
}

// TestProcServer runs the server on the host: a command gets the
// identity asked for with its gid as its only group, no capability, no
// signal ignored or blocked, a session of its own, the server's
// environment with the request's on top, the working directory, its
// stdin, and its exit code; a signal's death is 128+n; a request for
// root, or without argv, is refused, and a command that cannot start
// says why.
func TestProcServer(t *testing.T) {
	sock := startProcServer(t)
	dir, err := os.MkdirTemp("", "procserver-cwd-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const probe = `read -r in; echo "$(id -u) $(id -g) [$(id -G)] $FROM_CONTAINER $X $(pwd) $in"; ` +
		`grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|SigIgn|SigBlk):' /proc/self/status | tr -d '\t' | sort | paste -sd ' ' -; ` +
		`ps -o sid= -p $$ | tr -d ' '; echo $$; echo err >&2; exit 7`
	const clean = "CapAmb:0000000000000000 CapBnd:0000000000000000 CapEff:0000000000000000 CapInh:0000000000000000 CapPrm:0000000000000000 SigBlk:0000000000000000 SigIgn:0000000000000000"
	good := spawnRequest{UID: 61003, GID: 61004, Cwd: dir, Env: []string{"X=from-request"}, Argv: []string{"/bin/sh", "-c", probe}}
	tests := []struct {
		name    string
		req     spawnRequest
		stdin   string
		check   func(t *testing.T, out, errOut string, code int)
		refused bool
	}{
		{name: "command", req: good, stdin: "hello\n", check: func(t *testing.T, out, errOut string, code int) {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			want := "61003 61004 [61004] 1 from-request " + dir + " hello"
			if len(lines) != 4 || lines[0] != want || lines[1] != clean || lines[2] != lines[3] {
				t.Errorf("output:\n%s\nwant first lines %q and %q, and the sid equal to the pid", out, want, clean)
			}
			if errOut != "err\n" || code != 7 {
				t.Errorf("stderr %q code %d, want \"err\\n\" 7", errOut, code)
			}
		}},
		{name: "killed by a signal", req: spawnRequest{UID: 5, GID: 5, Cwd: "/", Argv: []string{"/bin/sh", "-c", "kill -9 $$"}},
			check: func(t *testing.T, _, _ string, code int) {
				if code != 137 {
					t.Errorf("code %d, want 137", code)
				}
			}},
		{name: "root refused", req: spawnRequest{UID: 0, GID: 5, Cwd: "/", Argv: []string{"/bin/true"}}, refused: true},
		{name: "root group refused", req: spawnRequest{UID: 5, GID: 0, Cwd: "/", Argv: []string{"/bin/true"}}, refused: true},
		{name: "no argv", req: spawnRequest{UID: 5, GID: 5, Cwd: "/"}, refused: true},
		{name: "relative cwd", req: spawnRequest{UID: 5, GID: 5, Cwd: "tmp", Argv: []string{"/bin/true"}}, refused: true},
		{name: "missing program", req: spawnRequest{UID: 5, GID: 5, Cwd: "/", Argv: []string{"/no/such"}}, refused: true},
		{name: "missing cwd", req: spawnRequest{UID: 5, GID: 5, Cwd: "/no/such", Argv: []string{"/bin/true"}}, refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code, err := runSpawned(t, sock, tt.req, tt.stdin)
			if tt.refused {
				if !errors.Is(err, errSpawnRefused) {
					t.Fatalf("err %v (out %q), want refused", err, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, out, errOut, code)
		})
	}
}

// TestProcServerRefusesOtherPeers: a process that is not root cannot
// have the server start anything, even with the socket in reach.
func TestProcServerRefusesOtherPeers(t *testing.T) {
	sock := startProcServer(t)
	if err := os.Chmod(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	// A command the server starts as uid 5 asks the server for another.
	// The server may close the connection before the request is sent (it
	// checks the peer first): a broken pipe is the same refusal.
	const ask = `import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
try:
    socket.send_fds(s, [b'{"uid":6,"gid":6,"cwd":"/","env":[],"argv":["/bin/true"]}\n'], [0, 1, 2])
    print(repr(s.recv(100)))
except (BrokenPipeError, ConnectionResetError):
    print("b''")`
	out, errOut, code, err := runSpawned(t, sock, spawnRequest{UID: 5, GID: 5, Cwd: "/", Argv: []string{"python3", "-I", "-c", ask, sock}}, "")
	if err != nil || code != 0 || strings.TrimSpace(out) != "b''" {
		t.Fatalf("out %q stderr %q code %d err %v: want the connection closed with no answer", out, errOut, code, err)
	}
}
