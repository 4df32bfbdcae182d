package executors

import (
	"errors"
	"slices"
	"testing"
)

// TestLayoutValidate: the prologue every backend runs refuses a layout
// that would mount the workspace over a system directory or start a run
// outside the workspace, and accepts the front ends' own.
func TestLayoutValidate(t *testing.T) {
	p := Prologue{Kind: KindSubprocess, UID: 1000, GID: 1000}
	for _, tc := range []struct {
		l  Layout
		ok bool
	}{
		{Layout{}, true},
		{Layout{Root: "/home/user", Workdir: "/home/user"}, true},
		{Layout{Root: "/mnt/user-data", Workdir: "/mnt/user-data/workspace"}, true},
		{Layout{Root: "/home/daytona"}, true},
		{Layout{Workdir: "/workspace/sub"}, true},
		{Layout{Root: "/etc"}, false},
		{Layout{Root: "/home/user/../../etc"}, false},
		{Layout{Root: "/home/user", Workdir: "/etc"}, false},
		{Layout{Root: "/mnt/user-data", Workdir: "/mnt/user-data/../../etc"}, false},
		{Layout{Workdir: "/home/user"}, false},
		{Layout{Workdir: "relative"}, false},
		{Layout{Workdir: "/workspacex"}, false},
	} {
		_, err := p.Resolve(Spec{Language: LangBash, WorkspaceDir: "/ws", Timeout: 1, Layout: tc.l})
		if got := err == nil; got != tc.ok || (err != nil && !errors.Is(err, ErrInvalidLayout)) {
			t.Errorf("layout %+v: err %v, want ok=%v (else ErrInvalidLayout)", tc.l, err, tc.ok)
		}
	}
}

// TestLayoutEnvAndRel: HOME and NODE_PATH follow the workdir, and Rel is
// the directory the manager makes.
func TestLayoutEnvAndRel(t *testing.T) {
	l := Layout{Root: "/mnt/user-data", Workdir: "/mnt/user-data/workspace"}
	env := EnvFor("/bin", "C.UTF-8", l)
	if !slices.Contains(env, "HOME=/mnt/user-data/workspace") || !slices.Contains(env, "NODE_PATH=/mnt/user-data/workspace/node_modules") {
		t.Errorf("env %v", env)
	}
	if !slices.Equal(EnvFor("/bin", "C.UTF-8", Layout{}), Env("/bin", "C.UTF-8")) {
		t.Error("the zero layout changed the environment")
	}
	for l, want := range map[Layout]string{{}: ".", l: "workspace", {Root: "/home/user", Workdir: "/home/user"}: ".",
		{Workdir: "/workspace/a/b"}: "a/b"} {
		if got := l.Rel(); got != want {
			t.Errorf("%+v.Rel() = %q, want %q", l, got, want)
		}
	}
}
