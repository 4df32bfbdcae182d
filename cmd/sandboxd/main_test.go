package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenOn(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	if err := os.WriteFile(sock, nil, 0o644); err != nil { // a stale file is replaced
		t.Fatal(err)
	}
	ln, err := listenOn("unix:" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v mode %v, want a 0600 socket", err, fi.Mode())
	}
	tcp, err := listenOn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	if !strings.HasPrefix(tcp.Addr().String(), "127.0.0.1:") {
		t.Errorf("tcp listener on %s", tcp.Addr())
	}
}

// TestServeRefusesWithoutKey: no API key, no server.
func TestServeRefusesWithoutKey(t *testing.T) {
	t.Setenv("SANDBOXD_TEST_EMPTY_KEY", "")
	err := serve([]string{"--api-key-env", "SANDBOXD_TEST_EMPTY_KEY", "--listen", "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("serve without a key: %v", err)
	}
}
