package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/executors"
)

func TestRuntimeDisablesNetwork(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--host-uds=open"}, false},
		{[]string{"--host-uds=open", "--network=none"}, true},
		{[]string{"--network", "none"}, true},
		{[]string{"-network=none"}, true},
		{[]string{"--network=sandbox"}, false},
		{[]string{"--network=host"}, false},
		{[]string{"--network"}, false},
	} {
		if got := runtimeDisablesNetwork(tc.args); got != tc.want {
			t.Errorf("runtimeDisablesNetwork(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestDirsOfADeadGatewayRemoved: the /etc files and egress directories a
// gateway killed with SIGKILL left are removed by the next executor's New
// (the fault soak counted them as leaks); this executor's own are its
// owner's, and go with Close.
func TestDirsOfADeadGatewayRemoved(t *testing.T) {
	tmp := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	var stale []string
	for _, name := range []string{"sandgate-docker-etc-1", "sandgate-docker-egress-1"} {
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "owner"), fmt.Appendf(nil, "%d 1\n", dead.Process.Pid), 0o600); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, dir)
	}
	e, err := New(t.Context(), Config{Pool: noPool, Host: "unix://" + filepath.Join(tmp, "no-engine.sock"), EgressDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range stale {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the dead gateway's %s: %v, want removed", filepath.Base(dir), err)
		}
	}
	mounts, err := e.netFilesMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		b, err := os.ReadFile(m.Source)
		if err != nil || string(b) != executors.NetworkFiles[filepath.Base(m.Target)] || !m.ReadOnly {
			t.Errorf("%s from %s: %q %v (read-only %v)", m.Target, m.Source, b, err, m.ReadOnly)
		}
	}
	box, err := e.newEgressBox()
	if err != nil {
		t.Fatal(err)
	}
	box.close()
	own := []string{filepath.Dir(mounts[0].Source), filepath.Dir(box.dir)}
	// A second executor sharing the directory (another gateway) keeps
	// the live owner's.
	other, err := New(t.Context(), Config{Pool: noPool, Host: "unix://" + filepath.Join(tmp, "no-engine.sock"), EgressDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	_ = other.Close(t.Context())
	for _, dir := range own {
		if _, err := os.Stat(filepath.Join(dir, "owner")); err != nil {
			t.Errorf("a live gateway's %s: %v, want kept", filepath.Base(dir), err)
		}
	}
	if err := e.Close(t.Context()); err != nil {
		t.Log(err)
	}
	for _, dir := range own {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Close left %s: %v", dir, err)
		}
	}
}
