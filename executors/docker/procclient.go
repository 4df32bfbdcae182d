package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// spawnRequest is one command for a sandbox's process server
// (procserver.go).
type spawnRequest struct {
	UID  int      `json:"uid"`
	GID  int      `json:"gid"`
	Cwd  string   `json:"cwd"`
	Env  []string `json:"env"`
	Argv []string `json:"argv"`
}

// errSpawnRefused is a request the server refused or a command it could
// not start.
var errSpawnRefused = errors.New("process server refused the command")

// spawned is a command the process server started: the gateway's ends of
// its pipes, and the connection its exit status arrives on.
type spawned struct {
	conn   *net.UnixConn
	stdin  *os.File
	stdout *os.File
	stderr *os.File
}

// spawn asks the server listening on sock to start req, with pipes for
// its three streams.
func spawn(ctx context.Context, sock string, req spawnRequest) (*spawned, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("dial the process server: %w", err)
	}
	conn := c.(*net.UnixConn)
	var theirs, ours [3]*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				_ = f.Close()
			}
		}
	}
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(theirs[:])
			closeAll(ours[:])
			_ = conn.Close()
			return nil, err
		}
		if i == 0 {
			theirs[i], ours[i] = r, w
		} else {
			theirs[i], ours[i] = w, r
		}
	}
	defer closeAll(theirs[:]) // the server holds its own copies once sent
	if req.Env == nil {
		req.Env = []string{} // the server wants a list
	}
	line, err := json.Marshal(req)
	if err == nil {
		err = sendWithFDs(conn, append(line, '\n'), theirs)
	}
	if err != nil {
		closeAll(ours[:])
		_ = conn.Close()
		return nil, fmt.Errorf("send to the process server: %w", err)
	}
	return &spawned{conn: conn, stdin: ours[0], stdout: ours[1], stderr: ours[2]}, nil
}

// sendWithFDs writes msg with fds attached to its first byte.
func sendWithFDs(conn *net.UnixConn, msg []byte, fds [3]*os.File) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	ints := make([]int, len(fds))
	for i, f := range fds {
		ints[i] = int(f.Fd())
	}
	var n int
	var werr error
	err = raw.Write(func(fd uintptr) bool {
		n, werr = unix.SendmsgN(int(fd), msg, unix.UnixRights(ints...), nil, 0)
		return !errors.Is(werr, unix.EAGAIN)
	})
	if err = errors.Join(err, werr); err != nil {
		return err
	}
	if n < len(msg) { // the descriptors went with the first byte
		_, err = conn.Write(msg[n:])
	}
	return err
}

// wait reads the command's end from the server: its exit code, or
// errSpawnRefused with the server's reason.
func (s *spawned) wait() (int, error) {
	line, err := bufio.NewReader(io.LimitReader(s.conn, 512)).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("process server: no exit status: %w", err)
	}
	line = strings.TrimSuffix(line, "\n")
	if rest, ok := strings.CutPrefix(line, "exit "); ok {
		code, err := strconv.Atoi(rest)
		if err != nil {
			return 0, fmt.Errorf("process server: %q", line)
		}
		return code, nil
	}
	return 0, fmt.Errorf("%w: %s", errSpawnRefused, line)
}

// close releases the gateway's ends.
func (s *spawned) close() {
	_ = s.stdin.Close()
	_ = s.stdout.Close()
	_ = s.stderr.Close()
	_ = s.conn.Close()
}
