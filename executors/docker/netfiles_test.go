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

// TestNetFilesOfADeadGatewayRemoved: the /etc files directory a gateway
// killed with SIGKILL left is removed by the next executor's New (the
// fault soak counted it as a leak), a live owner's is kept.
func TestNetFilesOfADeadGatewayRemoved(t *testing.T) {
	tmp := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(tmp, "sandgate-docker-etc-1")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "owner"), fmt.Appendf(nil, "%d 1\n", dead.Process.Pid), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := New(t.Context(), Config{Host: "unix://" + filepath.Join(tmp, "no-engine.sock"), EgressDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead gateway's directory: %v, want removed", err)
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
	dir := filepath.Dir(mounts[0].Source)
	if err := e.Close(t.Context()); err != nil {
		t.Log(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Close left %s: %v", dir, err)
	}
}
