package executortest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executors"
)

// suiteLayouts are the front ends' layouts (DESIGN.md §14): REST's,
// E2B's, DeerFlow's and Daytona's.
var suiteLayouts = map[string]executors.Layout{
	"rest":     {},
	"e2b":      {Root: "/home/user", Workdir: "/home/user"},
	"deerflow": {Root: "/mnt/user-data", Workdir: "/mnt/user-data/workspace"},
	"daytona":  {Root: "/home/daytona"},
}

// progLayout runs in a layout whose workspace is at $1: it prints its
// physical cwd and HOME, reads a file the test put in the workspace,
// writes one, lists the tree with find (as DeerFlow's ls tool does), and
// shows what the other roots hold.
const progLayout = `root=$1
echo "cwd=$(pwd -P)"
echo "home=$HOME"
echo "read=$(cat "$root/from-api.txt")"
echo from-code >"$root/by-code.txt"
find "$root" -maxdepth 1 -name 'from-*' | sed 's/^/found=/'
for r in /workspace /home/user /home/daytona /mnt/user-data; do
  [ -e "$r/from-api.txt" ] && echo "has=$r"
done
exit 0
`

// testLayouts: every front end's layout is real in the sandbox. Its root
// is the workspace (what a command writes the file API reads, and the
// reverse), a second mount of it rather than a symlink (pwd -P answers the
// layout's name), the cwd and HOME are its workdir, no other root shows
// the workspace (a layout naming a system directory is refused by the
// prologue every backend runs: executors' TestLayoutValidate). With
// the runtime root, DeerFlow's own sequence runs: `cd
// /mnt/user-data/workspace && python hello.py`.
func (s *suite) testLayouts(t *testing.T) {
	if s.h.NoLayouts != "" {
		t.Skip(s.h.NoLayouts)
	}
	for name, l := range suiteLayouts {
		t.Run(name, func(t *testing.T) {
			root := l.Root
			if root == "" {
				root = executors.WorkspaceMount
			}
			r := s.newRun(t, executors.LangBash, progLayout)
			r.spec.Code = "set -- " + root + "\n" + progLayout
			r.spec.Layout = l
			marker := "from-api-" + Nonce()
			writeHost(t, filepath.Join(r.ws, "from-api.txt"), marker)
			if rel := l.Rel(); rel != "." { // the caller makes the workdir
				mkdirShared(t, filepath.Join(r.ws, rel))
			}
			res := r.do(t.Context())
			if res.ExitCode != 0 {
				t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			want := []string{"cwd=" + l.Dir(), "home=" + l.Dir(), "read=" + marker,
				"found=" + root + "/from-api.txt", "has=/workspace"}
			if root != executors.WorkspaceMount {
				want = append(want, "has="+root)
			}
			got := strings.Fields(res.Stdout)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("in layout %+v the run printed:\n%s\nwant the lines %q", l, res.Stdout, want)
			}
			made, err := os.ReadFile(filepath.Join(r.ws, "by-code.txt"))
			if err != nil || string(made) != "from-code\n" {
				t.Errorf("%s/by-code.txt on the host: %q, %v; want %q", root, made, err, "from-code\n")
			}
		})
	}
	t.Run("deerflow-python", s.testDeerFlowPython)
}

// testDeerFlowPython is DeerFlow's call sequence as its sandbox sees it:
// hello.py written to /mnt/user-data/workspace by the file API, run with
// `python` from there, writing to /mnt/user-data/outputs. `python` is the
// runtime root's, so it needs DataStack.
func (s *suite) testDeerFlowPython(t *testing.T) {
	if !s.h.DataStack {
		t.Skip("python is the runtime root's (Harness.DataStack)")
	}
	r := s.newRun(t, executors.LangBash,
		"cd /mnt/user-data/workspace && python hello.py > /mnt/user-data/outputs/result.txt && cat /mnt/user-data/outputs/result.txt\n")
	r.spec.Layout = suiteLayouts["deerflow"]
	mkdirShared(t, filepath.Join(r.ws, "workspace"))
	mkdirShared(t, filepath.Join(r.ws, "outputs"))
	writeHost(t, filepath.Join(r.ws, "workspace", "hello.py"), "import os, sys\nprint('hello', sys.version_info[0], os.getcwd())\n")
	res := r.do(t.Context())
	want := "hello 3 /mnt/user-data/workspace\n"
	if res.ExitCode != 0 || res.Stdout != want {
		t.Fatalf("exit %d stdout %q stderr %q; want %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	got, err := os.ReadFile(filepath.Join(r.ws, "outputs", "result.txt"))
	if err != nil || string(got) != want {
		t.Errorf("outputs/result.txt on the host: %q, %v; want %q", got, err, want)
	}
}

func writeHost(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mkdirShared makes a directory any sandbox uid may write, as the
// manager's (owned by the session's uid) is to its own runs.
func mkdirShared(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o777); err != nil {
		t.Fatal(err)
	}
}
