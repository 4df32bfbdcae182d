package docker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPULimitKeptApart: a kept bundle's CPU quota leaves its config
// (runsc restores without it) and is set on the restored sandbox's
// cgroup afterwards, under cgroup v1 and v2; a bundle with no quota, or
// kept before quotas were taken out, sets nothing, and a cgroup that is
// not there fails the restore.
func TestCPULimitKeptApart(t *testing.T) {
	tests := []struct {
		name    string
		cpu     map[string]any
		v2      bool
		noGroup bool
		want    map[string]string // cgroup file -> content
		wantErr bool
	}{
		{name: "v1", cpu: map[string]any{"quota": 150000.0, "period": 100000.0, "shares": 0.0},
			want: map[string]string{"cpu/sandgate-restored/b/cpu.cfs_quota_us": "150000", "cpu/sandgate-restored/b/cpu.cfs_period_us": "100000"}},
		{name: "v2", cpu: map[string]any{"quota": 50000.0, "period": 100000.0}, v2: true,
			want: map[string]string{"sandgate-restored/b/cpu.max": "50000 100000"}},
		{name: "default period", cpu: map[string]any{"quota": 20000.0},
			want: map[string]string{"cpu/sandgate-restored/b/cpu.cfs_quota_us": "20000", "cpu/sandgate-restored/b/cpu.cfs_period_us": "100000"}},
		{name: "no quota", cpu: map[string]any{"shares": 0.0}, want: map[string]string{}},
		{name: "no cgroup", cpu: map[string]any{"quota": 100000.0, "period": 100000.0}, noGroup: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, bundle := t.TempDir(), filepath.Join(t.TempDir(), "b")
			if err := os.Mkdir(bundle, 0o700); err != nil {
				t.Fatal(err)
			}
			spec := map[string]any{"linux": map[string]any{"resources": map[string]any{"cpu": tt.cpu}}}
			if err := takeCPULimit(spec, bundle); err != nil {
				t.Fatal(err)
			}
			if _, left := tt.cpu["quota"]; left {
				t.Fatalf("quota left in the restored spec: %v", tt.cpu)
			}
			group := filepath.Join(root, "cpu", "sandgate-restored", "b")
			if tt.v2 {
				group = filepath.Join(root, "sandgate-restored", "b")
				if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory pids"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if !tt.noGroup {
				if err := os.MkdirAll(group, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := applyCPULimit(root, bundle)
			if (err != nil) != tt.wantErr {
				t.Fatalf("apply: %v, want error %v", err, tt.wantErr)
			}
			for file, want := range tt.want {
				got, err := os.ReadFile(filepath.Join(root, file))
				if err != nil || string(got) != want {
					t.Errorf("%s = %q (%v), want %q", file, got, err, want)
				}
			}
			if len(tt.want) == 0 && !tt.wantErr {
				if entries, _ := os.ReadDir(group); len(entries) != 0 {
					t.Errorf("cgroup written with no quota kept: %v", entries)
				}
			}
		})
	}
}

// TestStandaloneTakesCPULimit: standalone, which every kept bundle goes
// through (pause, fork, named snapshot), leaves no quota in config.json.
func TestStandaloneTakesCPULimit(t *testing.T) {
	dir := t.TempDir()
	spec := map[string]any{"root": map[string]any{"path": "/old"},
		"linux": map[string]any{"resources": map[string]any{"cpu": map[string]any{"quota": 100000.0, "period": 100000.0}}}}
	if err := standalone(spec, "/rootfs", dir); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(spec)
	if strings.Contains(string(raw), "quota") {
		t.Fatalf("quota in the standalone spec: %s", raw)
	}
	if kept, err := os.ReadFile(filepath.Join(dir, cpuLimitFile)); err != nil || !strings.Contains(string(kept), `"quota":100000`) {
		t.Fatalf("kept limit %q %v", kept, err)
	}
}

// TestCPULimitCarriedOver: a bundle kept of a restored kernel (whose
// config.json has no quota any more) takes the quota kept beside the
// bundle it was restored from; one whose spec had a quota keeps its own.
func TestCPULimitCarriedOver(t *testing.T) {
	restored, kept, own := t.TempDir(), t.TempDir(), t.TempDir()
	spec := map[string]any{"linux": map[string]any{"resources": map[string]any{"cpu": map[string]any{"quota": 70000.0, "period": 100000.0}}}}
	if err := standalone(spec, "/rootfs", restored); err != nil {
		t.Fatal(err)
	}
	// The restored kernel's spec, kept again: no quota left in it.
	if err := standalone(spec, "/rootfs", kept); err != nil {
		t.Fatal(err)
	}
	if err := carryCPULimit(restored, kept); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(kept, cpuLimitFile)); err != nil || !strings.Contains(string(got), `"quota":70000`) {
		t.Fatalf("carried limit %q %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(own, cpuLimitFile), []byte(`{"quota":5000,"period":100000}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := carryCPULimit(restored, own); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(own, cpuLimitFile)); !strings.Contains(string(got), `"quota":5000`) {
		t.Fatalf("own limit replaced: %q", got)
	}
}
