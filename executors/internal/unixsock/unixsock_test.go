package unixsock

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestListen: short and over-long directory paths both give a socket at
// dir/name that a client reaches by its full path's directory, and Close
// removes the file.
func TestListen(t *testing.T) {
	for _, long := range []bool{false, true} {
		dir := t.TempDir()
		if long {
			dir = filepath.Join(dir, strings.Repeat("d", 100))
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		ln, err := Listen(dir, "proxy.sock")
		if err != nil {
			t.Fatalf("long=%v: %v", long, err)
		}
		p := filepath.Join(dir, "proxy.sock")
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Fatalf("long=%v: %s: %v %v", long, p, fi, err)
		}
		go func() {
			if c, err := ln.Accept(); err == nil {
				_, _ = c.Write([]byte("x"))
				c.Close()
			}
		}()
		// The client dials through a short path to the same directory.
		d, _ := os.Open(dir)
		c, err := net.Dial("unix", "/proc/self/fd/"+strconv.Itoa(int(d.Fd()))+"/proxy.sock")
		d.Close()
		if err != nil {
			t.Fatalf("long=%v: dial: %v", long, err)
		}
		b := make([]byte, 1)
		if _, err := c.Read(b); err != nil || b[0] != 'x' {
			t.Errorf("long=%v: read %q %v", long, b, err)
		}
		c.Close()
		ln.Close()
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("long=%v: socket file left after Close: %v", long, err)
		}
	}
}
