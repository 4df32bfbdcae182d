// Package executortest is the conformance suite every executor backend must
// pass, plus a fake Executor for testing callers.
//
// A backend's test calls Run with a Harness:
//
//	func TestConformance(t *testing.T) {
//		executortest.Run(t, executortest.Harness{
//			New: func(t *testing.T) executors.Executor { ... },
//			ProcessesVisible: true,
//		})
//	}
//
// The suite only uses loopback and the workspace; it never reaches the
// network. The egress cases (egress.go) grant runs network through a
// TestProxy (proxy.go), a small real HTTP proxy that dials only test
// servers on 127.0.0.1; a backend without network_grant must refuse them. Sub-tests do not run in parallel: one of them changes the test
// process's environment (t.Setenv) to prove it is not inherited.
package executortest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// Harness adapts one backend to the suite.
type Harness struct {
	// New returns a fresh executor for one sub-test. Required. It may call
	// t.Skip when the backend cannot run here.
	New func(t *testing.T) executors.Executor
	// Workspace returns a fresh host workspace directory for one sub-test.
	// Default: NewWorkspace.
	Workspace func(t *testing.T) string
	// Languages lists the languages to test. Default: python, bash and
	// javascript.
	Languages []string
	// ProcessesVisible says the backend's processes show up in this
	// host's /proc (subprocess, a local Docker engine). The process-tree
	// tests then also prove the processes they expect to be killed did
	// exist; without it they can only show nothing is left over.
	ProcessesVisible bool
	// DetachedEscape, when non-empty, says why this backend cannot kill
	// processes that left the run's process group (setsid, double fork):
	// the subprocess backend without root, say. The tree tests then only
	// require the in-group child to die, log the reason, and kill the
	// survivors themselves. Every production backend leaves it empty.
	DetachedEscape string
	// DataStack says the backend runs on the runtime root filesystem
	// (images/runtime), so the design doc's data stack (pandas, numpy,
	// matplotlib with the Agg backend) must import and plot, and its
	// Fingerprint must match the golden file, which is that root's
	// environment (a backend on the host's system directories, such as
	// the subprocess executor under a plain go test, has the host's
	// passwd, toolchain and directories).
	DataStack bool
	// FingerprintExceptions lists, by line prefix, what this backend's
	// Fingerprint may show differently from the golden file, each with the
	// reason (logged by the case). Every entry is a known difference a
	// client can observe: keep it short, and fix rather than list.
	FingerprintExceptions map[string]string
	// RunTimeout is the Spec.Timeout of ordinary runs (default 30s): long
	// enough for a cold interpreter start on a loaded machine.
	RunTimeout time.Duration
	// Serial says the executor under test cannot hold two runs at once
	// (a fixture with one workspace mount point): the suite then never
	// overlaps runs, where it otherwise runs the languages of the cases
	// that wait out a timeout or a sleep in parallel.
	Serial bool
	// NoLayouts, when non-empty, says why the Layouts case cannot run
	// (a fixture that is one sandbox for every run, its HOME fixed).
	NoLayouts string
	// CopiedWorkspace, when non-empty, says why the backend copies the
	// host workspace in before a run and back after it instead of
	// sharing it while the run runs (a pod on another node). The
	// StreamWhileRunning case, whose program waits for a file the test
	// writes on the host mid-run, then skips with the reason;
	// StreamIsResult still checks the stream.
	CopiedWorkspace string
}

// Run runs the conformance suite against h.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("executortest: Harness.New is required")
	}
	if h.Workspace == nil {
		h.Workspace = NewWorkspace
	}
	if len(h.Languages) == 0 {
		h.Languages = []string{executors.LangPython, executors.LangBash, executors.LangJavaScript}
	}
	if h.RunTimeout <= 0 {
		h.RunTimeout = 30 * time.Second
	}
	s := &suite{h: h}
	t.Run("Available", s.testAvailable)
	t.Run("StdoutStderr", s.forEachLang(s.testStdoutStderr))
	t.Run("ExitCodes", s.forEachLang(s.testExitCodes))
	t.Run("FailureIsResult", s.forEachLang(s.testFailureIsResult))
	t.Run("OutputCapAndSpill", s.forEachLang(s.testOutputCap))
	t.Run("OutputFlood", s.forEachLang(s.testOutputFlood))
	t.Run("TimeoutKillsTree", s.forEachLangAtOnce(s.testTimeoutKillsTree))
	t.Run("CancelKillsTree", s.forEachLang(s.testCancelKillsTree))
	t.Run("EnvironmentNotInherited", s.forEachLang(s.testEnvironment))
	t.Run("WorkingDirectory", s.forEachLang(s.testWorkingDirectory))
	t.Run("HostPathMasked", s.forEachLang(s.testHostPathMasked))
	t.Run("BinaryAndUnicode", s.forEachLang(s.testBinaryAndUnicode))
	t.Run("StreamWhileRunning", s.forEachLangAtOnce(s.testStreamWhileRunning))
	t.Run("StreamIsResult", s.forEachLang(s.testStreamIsResult))
	t.Run("WorkspaceUntouched", s.forEachLang(s.testWorkspaceUntouched))
	t.Run("AbsoluteWorkspacePaths", s.forEachLang(s.testAbsoluteWorkspacePaths))
	t.Run("Layouts", s.testLayouts)
	t.Run("HostFilesInvisible", s.forEachLang(s.testHostFilesInvisible))
	t.Run("NoNetwork", s.forEachLang(s.testNoNetwork))
	t.Run("EgressFailClosed", s.testEgressFailClosed)
	t.Run("Egress", s.forEachLang(s.testEgress))
	t.Run("DataStack", s.testDataStack)
	t.Run("Fingerprint", s.forEachLang(s.testFingerprint))
	t.Run("ProcessDefaults", s.testProcessDefaults)
	t.Run("MemoryLimit", s.forEachLang(s.testMemoryLimit))
	t.Run("ProcessLimit", s.forEachLang(s.testProcessLimit))
}

type suite struct {
	h Harness
}

// forEachLang turns a per-language test into one sub-test per language.
func (s *suite) forEachLang(f func(t *testing.T, lang string)) func(t *testing.T) {
	return func(t *testing.T) {
		for _, lang := range s.h.Languages {
			t.Run(lang, func(t *testing.T) { f(t, lang) })
		}
	}
}

// forEachLangAtOnce is forEachLang with the languages' sub-tests in
// parallel (unless Harness.Serial), for cases that mostly wait out a
// timeout or a sleep: each run's markers are its own, and none reads
// process-wide state (allocations, the environment) or spends a per-uid
// limit.
func (s *suite) forEachLangAtOnce(f func(t *testing.T, lang string)) func(t *testing.T) {
	if s.h.Serial {
		return s.forEachLang(f)
	}
	return func(t *testing.T) {
		for _, lang := range s.h.Languages {
			t.Run(lang, func(t *testing.T) {
				t.Parallel()
				f(t, lang)
			})
		}
	}
}

// NewWorkspace makes a fresh workspace directory the way the workspace
// package must: its parent is traversable (0711) but not listable, so a
// sandbox uid can reach its own workspace by absolute path without seeing
// any other.
func NewWorkspace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatalf("chmod workspace parent: %v", err)
	}
	return dir
}

// Nonce returns a random lower-case hex string for unique markers and ids.
func Nonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// run is one Execute call with the suite's defaults.
type run struct {
	t    *testing.T
	exec executors.Executor
	ws   string
	spec executors.Spec
}

func (s *suite) newRun(t *testing.T, lang, code string) *run {
	t.Helper()
	ws := s.h.Workspace(t)
	return &run{t: t, exec: s.h.New(t), ws: ws, spec: executors.Spec{
		RequestID:    "req-" + Nonce(),
		SessionID:    "sess-" + Nonce(),
		Language:     lang,
		Code:         code,
		Timeout:      s.h.RunTimeout,
		WorkspaceDir: ws,
	}}
}

// do executes the run and fails the test on an error.
func (r *run) do(ctx context.Context) executors.Result {
	r.t.Helper()
	res, err := r.exec.Execute(ctx, r.spec)
	if err != nil {
		r.t.Fatalf("Execute: %v", err)
	}
	return res
}

// hostPath maps a /workspace/... path from a Result to the host.
func (r *run) hostPath(p string) string {
	r.t.Helper()
	rel, ok := strings.CutPrefix(p, "/workspace/")
	if !ok {
		r.t.Fatalf("path %q does not start with /workspace/", p)
	}
	return filepath.Join(r.ws, filepath.FromSlash(rel))
}

func (s *suite) testAvailable(t *testing.T) {
	e := s.h.New(t)
	if err := e.Available(t.Context()); err != nil {
		t.Fatalf("Available: %v", err)
	}
}
