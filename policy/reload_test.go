package policy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ciBashRule is the administrator's example: deny bash in sessions whose id
// starts with "ci-". It is a new file next to the default policy.
const ciBashRule = `package sandgate.exec

deny_reasons contains reason("admin.ci_bash", "bash is not allowed in CI sessions") if {
	input.request.language == "bash"
	startswith(input.request.session_id, "ci-")
}
`

// copyDefaultTree writes the embedded policy into a fresh directory.
func copyDefaultTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := readTree(DefaultFS(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		writeFile(t, filepath.Join(dir, f.path), string(f.content))
	}
	return dir
}

// writeFile writes through a temp file and a rename, as editors do.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func ciBashInput() Input {
	in := baseInput("PERMISSIVE", "LOW", false)
	in.Request.Language = "bash"
	in.Request.SessionID = "ci-build-42"
	return in
}

func TestAdminRuleTakesEffectAfterReload(t *testing.T) {
	dir := copyDefaultTree(t)
	e := newEngine(t, Options{Dir: dir})
	ctx := context.Background()
	if d := e.Decide(ctx, ciBashInput()); d.Action != ActionAllow {
		t.Fatalf("before the rule: %s %v, want allow", d.Action, d.Reasons)
	}
	before := e.Revision()
	writeFile(t, filepath.Join(dir, "sandgate", "exec", "ci.rego"), ciBashRule)
	st, err := e.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision == before {
		t.Fatal("revision did not change after adding a file")
	}
	d := e.Decide(ctx, ciBashInput())
	if d.Action != ActionDeny || !d.OnlyReason("admin.ci_bash") {
		t.Fatalf("after the rule: %s %v, want deny admin.ci_bash", d.Action, d.Reasons)
	}
	other := ciBashInput()
	other.Request.SessionID = "dev-1"
	if d := e.Decide(ctx, other); d.Action != ActionAllow {
		t.Fatalf("the rule must only hit ci- sessions: %s %v", d.Action, d.Reasons)
	}
}

func TestFailedReloadKeepsLastGood(t *testing.T) {
	dir := copyDefaultTree(t)
	e := newEngine(t, Options{Dir: dir})
	ctx := context.Background()
	good := e.Revision()
	writeFile(t, filepath.Join(dir, "sandgate", "exec", "ci.rego"), "package sandgate.exec\n\ndeny_reasons contains oops if {")
	st, err := e.Reload(ctx)
	if err == nil {
		t.Fatal("broken policy accepted")
	}
	if st.Revision != good || e.Revision() != good {
		t.Fatalf("revision moved to %s after a failed reload", st.Revision)
	}
	if st.LastError == "" || st.ReloadErrors != 1 {
		t.Fatalf("status does not show the failure: %+v", st)
	}
	if d := e.Decide(ctx, ciBashInput()); d.Action != ActionAllow || d.PolicyRevision != good {
		t.Fatalf("last good policy not in force: %+v", d)
	}
	writeFile(t, filepath.Join(dir, "sandgate", "exec", "ci.rego"), ciBashRule)
	st, err = e.Reload(ctx)
	if err != nil || st.LastError != "" {
		t.Fatalf("fixed policy: err %v, status %+v", err, st)
	}
}

func TestDataThresholdChange(t *testing.T) {
	dir := copyDefaultTree(t)
	e := newEngine(t, Options{Dir: dir})
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(dir, "sandgate", "config", "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Raise the ceiling from 300 s to 600 s through data alone.
	patched := strings.Replace(string(b), `"max_timeout_s": 300`, `"max_timeout_s": 600`, 1)
	if patched == string(b) {
		t.Fatal("data.json no longer has max_timeout_s 300")
	}
	writeFile(t, filepath.Join(dir, "sandgate", "config", "data.json"), patched)
	if _, err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	in := baseInput("STRICT", "LOW", false)
	in.Request.TimeoutS = 10000
	if d := e.Decide(ctx, in); d.Obligations.TimeoutS != 600 {
		t.Fatalf("timeout_s %d, want the new ceiling 600", d.Obligations.TimeoutS)
	}
}

func TestWatchReloadsOnChange(t *testing.T) {
	dir := copyDefaultTree(t)
	e := newEngine(t, Options{Dir: dir})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Watch(ctx, time.Hour) }() // a long poll: the fsnotify path must do it
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	waitWatching(t, e, filepath.Join(dir, "sandgate", "exec", "probe.rego"))
	// A new subdirectory, created after Watch added its directories, is
	// watched too.
	writeFile(t, filepath.Join(dir, "sandgate", "admin", "ci.rego"), ciBashRule)
	waitFor(t, 10*time.Second, func() bool {
		return e.Decide(context.Background(), ciBashInput()).Action == ActionDeny
	})
	// A broken edit is reported and does not replace the good policy.
	good := e.Revision()
	writeFile(t, filepath.Join(dir, "sandgate", "admin", "ci.rego"), "package sandgate.exec\n\nbroken {")
	waitFor(t, 10*time.Second, func() bool { return e.Status().LastError != "" })
	if e.Revision() != good {
		t.Fatal("broken edit replaced the policy")
	}
}

func TestWatchPollFallback(t *testing.T) {
	dir := copyDefaultTree(t)
	e := newEngine(t, Options{Dir: dir})
	writeFile(t, filepath.Join(dir, "sandgate", "exec", "ci.rego"), ciBashRule)
	// Without fsnotify events (the file changed before Watch started), the
	// hash poll alone must pick the change up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = e.Watch(ctx, 100*time.Millisecond) }()
	waitFor(t, 10*time.Second, func() bool {
		return e.Decide(context.Background(), ciBashInput()).Action == ActionDeny
	})
}

// waitWatching returns once Watch has added its directories: until a
// reload picks it up, it rewrites probe, a file of a watched directory,
// with a comment that changes the revision. A write before the watches are
// in place raises no event (and the poll may be an hour away); the first
// write after them does. A reload means Watch is past adding its tree.
func waitWatching(t *testing.T, e *Engine, probe string) {
	t.Helper()
	before := e.Revision()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; e.Revision() == before; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the watcher reloaded none of the probe's writes")
		}
		writeFile(t, probe, fmt.Sprintf("package sandgate.exec\n\n# probe %d\n", i))
		// The debounce (200 ms) and a reload, with room for a loaded
		// machine before writing again.
		for wait := time.Now().Add(time.Second); e.Revision() == before && time.Now().Before(wait); {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRevisionIsContentHash(t *testing.T) {
	a := newEngine(t, Options{FS: treeWith(t, nil)})
	b := newEngine(t, Options{})
	if a.Revision() != b.Revision() {
		t.Fatal("same files, different revisions")
	}
	c := newEngine(t, Options{FS: treeWith(t, map[string]string{"sandgate/exec/ci.rego": ciBashRule})})
	if c.Revision() == a.Revision() {
		t.Fatal("different files, same revision")
	}
	// Test files are not served, so they do not change the revision.
	d := newEngine(t, Options{FS: treeWith(t, map[string]string{"sandgate/exec/extra_test.rego": "package x_test\n"})})
	if d.Revision() != a.Revision() {
		t.Fatal("a _test.rego file changed the served revision")
	}
}
