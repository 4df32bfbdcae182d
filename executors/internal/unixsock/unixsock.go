// Package unixsock listens on a Unix socket in a directory whatever the
// directory's path length: a socket address holds at most 107 bytes, and
// the executors' egress sockets live in directories whose paths (a
// temporary directory, a state directory) can be longer.
package unixsock

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// maxPath is the longest path a sockaddr_un holds (108 with the NUL).
const maxPath = 107

// Listen listens on dir/name. A path too long for a socket address is
// bound through the directory's descriptor (/proc/self/fd/N/name), which
// names the same directory in a few bytes. The socket file is dir/name
// either way, and it is unlinked when the listener closes.
func Listen(dir, name string) (net.Listener, error) {
	p := filepath.Join(dir, name)
	if len(p) <= maxPath {
		return net.Listen("unix", p)
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", p, err)
	}
	defer d.Close()
	short := "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + name
	ln, err := net.Listen("unix", short)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", p, err)
	}
	// The listener would unlink the short name at Close, which no longer
	// resolves once d is closed: unlink the real one instead.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return &unlinking{Listener: ln, path: p}, nil
}

// unlinking removes the socket file when the listener closes.
type unlinking struct {
	net.Listener
	path string
}

func (u *unlinking) Close() error {
	err := u.Listener.Close()
	_ = os.Remove(u.path)
	return err
}
