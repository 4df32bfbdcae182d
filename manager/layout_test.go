package manager_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

var dfLayout = manager.Layout{
	Layout: executors.Layout{Root: "/mnt/user-data", Workdir: "/mnt/user-data/workspace"},
	Dirs:   []string{"workspace", "uploads", "outputs"},
}

// TestLayoutOfTheCreatingFrontEnd: a run of a session a front end with a
// layout created carries that layout to the executor, with its
// directories made in the workspace first (again after a command removed
// one); a session another front end created has /workspace alone.
func TestLayoutOfTheCreatingFrontEnd(t *testing.T) {
	h := newHarness(t, hopts{layouts: map[string]manager.Layout{"deerflow": dfLayout}})
	ctx := manager.WithFrontEnd(t.Context(), "deerflow")
	for i := range 2 {
		req := request("python", "print(1)")
		req.SessionID = "df"
		if _, err := h.m.Run(ctx, req); err != nil {
			t.Fatal(err)
		}
		calls := h.sub.Calls()
		if got := calls[len(calls)-1].Layout; got != dfLayout.Layout {
			t.Fatalf("run %d: layout %+v, want %+v", i, got, dfLayout.Layout)
		}
		d, _ := h.ws.Ensure(ctx, key("df"))
		for _, dir := range dfLayout.Dirs {
			if fi, err := os.Stat(filepath.Join(d.Path, dir)); err != nil || !fi.IsDir() {
				t.Fatalf("run %d: %s not made: %v", i, dir, err)
			}
		}
		if err := os.Remove(filepath.Join(d.Path, "outputs")); err != nil {
			t.Fatal(err)
		}
	}
	req := request("python", "print(1)")
	req.SessionID = "rest"
	if _, err := h.m.Run(manager.WithFrontEnd(t.Context(), "rest"), req); err != nil {
		t.Fatal(err)
	}
	calls := h.sub.Calls()
	if got := calls[len(calls)-1].Layout; got != (executors.Layout{}) {
		t.Errorf("a REST session's layout %+v, want /workspace alone", got)
	}
}

// TestLayoutsRefusedAtStart: a layout a backend would refuse, or whose
// workdir nothing makes, stops the manager from starting.
func TestLayoutsRefusedAtStart(t *testing.T) {
	ws, err := workspace.New(t.TempDir(), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []manager.Layout{
		{Layout: executors.Layout{Root: "/etc"}},
		{Layout: executors.Layout{Root: "/mnt/user-data", Workdir: "/mnt/user-data/workspace"}},
		{Layout: executors.Layout{Root: "/mnt/user-data"}, Dirs: []string{"../out"}},
	} {
		_, err := manager.New(manager.Config{}, manager.Deps{Assessor: risk.NewAssessor(nil, nil), Policy: &recDecider{},
			Workspaces: ws, Audit: newHarness(t, hopts{}).audit, Layouts: map[string]manager.Layout{"x": l}})
		if err == nil || !strings.Contains(err.Error(), "front end x") {
			t.Errorf("layout %+v: err %v, want a refusal naming the front end", l, err)
		}
	}
}
