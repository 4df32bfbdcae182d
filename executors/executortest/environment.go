package executortest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// The environment checks of DESIGN.md §6: whatever the isolation, code sees
// the session workspace at /workspace and no other host path, and has no
// network. A backend that differs here is a bug a client would notice.

// progAbsWorkspace reads a file the test put in the workspace and writes
// one in a new directory, both by absolute /workspace paths.
var progAbsWorkspace = program{
	"python": `import os
print(open("/workspace/from-api.txt").read().upper())
os.makedirs("/workspace/made/by", exist_ok=True)
open("/workspace/made/by/code.txt", "w").write("from-code")
`,
	"bash": `tr a-z A-Z < /workspace/from-api.txt; echo
mkdir -p /workspace/made/by && printf from-code > /workspace/made/by/code.txt
`,
	"javascript": `const fs = require('fs');
console.log(fs.readFileSync('/workspace/from-api.txt', 'utf8').toUpperCase());
fs.mkdirSync('/workspace/made/by', { recursive: true });
fs.writeFileSync('/workspace/made/by/code.txt', 'from-code');
`,
}

// progReadPaths prints, for each path argument, "path: content" when the
// file can be read, "path: -" otherwise. %s is a list literal of paths
// in the language's syntax.
var progReadPaths = program{
	"python": `for p in %s:
    try:
        print(p + ": " + open(p).read())
    except OSError:
        print(p + ": -")
`,
	"bash": `for p in %s; do
  if c=$(cat "$p" 2>/dev/null); then echo "$p: $c"; else echo "$p: -"; fi
done
`,
	"javascript": `for (const p of %s) {
  try { console.log(p + ': ' + require('fs').readFileSync(p, 'utf8')); }
  catch { console.log(p + ': -'); }
}
`,
}

// progConnect tries a TCP connection to 127.0.0.1:%d and prints
// "connected" or "refused".
var progConnect = program{
	"python": `import socket
try:
    socket.create_connection(("127.0.0.1", %d), timeout=3).close()
    print("connected")
except OSError:
    print("refused")
`,
	"bash": `if timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>/dev/null; then echo connected; else echo refused; fi
`,
	"javascript": `const s = require('net').connect(%d, '127.0.0.1');
s.setTimeout(3000, () => { console.log('refused'); s.destroy(); });
s.on('connect', () => { console.log('connected'); s.destroy(); });
s.on('error', () => console.log('refused'));
`,
}

// progDataStack is the design doc's example, plus a plot rendered with
// no display.
const progDataStack = `import pandas as pd, numpy as np, matplotlib
import matplotlib.pyplot as plt
plt.plot(np.arange(3))
plt.savefig("/workspace/plot.png")
print(pd.__version__, matplotlib.get_backend().lower())
`

// testWorkspaceUntouched: a run that writes nothing leaves nothing in the
// workspace. An executor's own files there (the program text, say) would
// show up in the agent's ls and grep, and only in some executors.
func (s *suite) testWorkspaceUntouched(t *testing.T, lang string) {
	r := s.newRun(t, lang, progStdoutStderr.get(t, lang))
	if res := r.do(t.Context()); res.ExitCode != 0 {
		t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	var left []string
	_ = filepath.WalkDir(r.ws, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != r.ws {
			left = append(left, strings.TrimPrefix(p, r.ws))
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("the run left %v in the workspace", left)
	}
}

func (s *suite) testAbsoluteWorkspacePaths(t *testing.T, lang string) {
	r := s.newRun(t, lang, progAbsWorkspace.get(t, lang))
	if err := os.WriteFile(filepath.Join(r.ws, "from-api.txt"), []byte("from-api"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := r.do(t.Context())
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "FROM-API" {
		t.Fatalf("reading /workspace/from-api.txt: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	got, err := os.ReadFile(filepath.Join(r.ws, "made", "by", "code.txt"))
	if err != nil || string(got) != "from-code" {
		t.Errorf("/workspace/made/by/code.txt on the host: %q, %v; want %q", got, err, "from-code")
	}
}

// testHostFilesInvisible plants world-readable files on the host outside
// the workspace (a fresh directory, and the test's own source directory,
// which stands for the gateway's) and checks the code reads none of them.
func (s *suite) testHostFilesInvisible(t *testing.T, lang string) {
	secret := "host-secret-" + Nonce()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(dir, "planted.txt")
	if err := os.WriteFile(planted, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	paths := []string{planted}
	if wd, err := os.Getwd(); err == nil {
		if entries, err := os.ReadDir(wd); err == nil && len(entries) > 0 {
			paths = append(paths, filepath.Join(wd, entries[0].Name()))
		}
	}
	list := `["` + strings.Join(paths, `", "`) + `"]`
	if lang == "bash" {
		list = `"` + strings.Join(paths, `" "`) + `"`
	}
	r := s.newRun(t, lang, progReadPaths.get(t, lang, list))
	res := r.do(t.Context())
	for _, p := range paths {
		if !strings.Contains(res.Stdout, p+": -\n") {
			t.Errorf("the code read the host file %s:\n%s%s", p, res.Stdout, res.Stderr)
		}
	}
	if strings.Contains(res.Stdout, secret) {
		t.Errorf("the planted secret reached the output:\n%s", res.Stdout)
	}
}

// testNoNetwork starts a listener on the host's 127.0.0.1 and checks the
// code cannot reach it (and that nothing connected).
func (s *suite) testNoNetwork(t *testing.T, lang string) {
	port, accepted := LoopbackListener(t)
	r := s.newRun(t, lang, progConnect.get(t, lang, port))
	res := r.do(t.Context())
	if strings.TrimSpace(res.Stdout) != "refused" {
		t.Errorf("connecting to the host's 127.0.0.1:%d: stdout %q stderr %q, want refused", port, res.Stdout, res.Stderr)
	}
	time.Sleep(50 * time.Millisecond)
	if n := accepted(); n > 0 {
		t.Errorf("the host listener accepted %d connections from the code", n)
	}
}

// LoopbackListener listens on the host's 127.0.0.1 for the test's
// duration and counts the connections it accepts: what a backend's
// network isolation must keep sandboxed code from reaching.
func LoopbackListener(t *testing.T) (port int, accepted func() int) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, func() int { return int(n.Load()) }
}

func (s *suite) testDataStack(t *testing.T) {
	if !s.h.DataStack {
		t.Skip("the backend does not run on the runtime root filesystem here")
	}
	r := s.newRun(t, "python", progDataStack)
	res := r.do(t.Context())
	if f := strings.Fields(res.Stdout); res.ExitCode != 0 || len(f) != 2 || f[1] != "agg" {
		t.Fatalf("exit %d stdout %q stderr %q, want the pandas version and the agg backend", res.ExitCode, res.Stdout, res.Stderr)
	}
	png, err := os.ReadFile(filepath.Join(r.ws, "plot.png"))
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Errorf("plot.png: %v (%d bytes), want a PNG", err, len(png))
	}
	t.Logf("pandas %s", fmt.Sprint(strings.Fields(res.Stdout)[0]))
}

// progProcessDefaults prints what a program inherits from whatever
// started it: whether a pipe's writer dies of SIGPIPE when its reader
// goes (an ignored SIGPIPE makes yes fail with "Broken pipe" instead),
// the signals it finds ignored (bash lists those ignored on entry as
// traps of ”; gVisor's /proc has no SigIgn), and how many supplementary
// groups it has besides its own gid. A launcher written in another
// language (Python ignores SIGPIPE and SIGXFSZ; a shell's background job
// ignores SIGINT) leaks its dispositions through exec. SIGHUP is left
// out: a gateway started under nohup passes it on in every backend that
// forks it.
const progProcessDefaults = `yes | head -n1
echo "pipe ${PIPESTATUS[0]}"
trap -p | grep -v SIGHUP
g=$(id -g)
echo "extra groups $(for x in $(id -G); do [ "$x" = "$g" ] || echo "$x"; done | wc -l)"
`

// testProcessDefaults: see progProcessDefaults. Every backend starts a
// program as a fresh login would: SIGPIPE kills a writer, no signal is
// ignored, no group but its own.
func (s *suite) testProcessDefaults(t *testing.T) {
	if !slices.Contains(s.h.Languages, executors.LangBash) {
		t.Skip("the backend runs no bash")
	}
	r := s.newRun(t, executors.LangBash, progProcessDefaults)
	res := r.do(t.Context())
	const want = "y\npipe 141\nextra groups 0\n"
	if res.ExitCode != 0 || res.Stdout != want || res.Stderr != "" {
		t.Fatalf("exit %d stdout %q stderr %q, want %q and no stderr", res.ExitCode, res.Stdout, res.Stderr, want)
	}
}
