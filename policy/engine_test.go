package policy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

type decideCase struct {
	Name              string   `yaml:"name"`
	Mode              string   `yaml:"mode"`
	Level             string   `yaml:"level"`
	ProvenSafe        bool     `yaml:"proven_safe"`
	Language          string   `yaml:"language"`
	NeedsBrowser      bool     `yaml:"needs_browser"`
	NeedsPersistentFS bool     `yaml:"needs_persistent_fs"`
	Available         []string `yaml:"available"`
	Want              struct {
		Action   string   `yaml:"action"`
		Executor string   `yaml:"executor"`
		Reasons  []string `yaml:"reasons"`
	} `yaml:"want"`
}

func (c decideCase) input() Input {
	in := baseInput(c.Mode, c.Level, c.ProvenSafe)
	if c.Language != "" {
		in.Request.Language = c.Language
	}
	in.Request.Context = Context{NeedsBrowser: c.NeedsBrowser, NeedsPersistentFS: c.NeedsPersistentFS}
	if c.Available != nil {
		in.Executors = c.Available
	}
	return in
}

func baseInput(mode, level string, proven bool) Input {
	return Input{
		Mode: mode,
		Request: Request{Kind: "run_code", SessionID: "s-1", Language: "python",
			CodeBytes: 9, CodeSHA256: SHA256Hex([]byte("print(1)\n")), TimeoutS: 30},
		Risk:      Risk{Level: level, ProvenSafe: proven, Patterns: []RiskPattern{{ID: "x.y", Level: level, Line: 1}}},
		Principal: Principal{Role: "agent", Name: "agent"},
		Executors: []string{"subprocess", "docker", "aio"},
	}
}

func loadCases(t *testing.T) []decideCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "decide.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []decideCase
	if err := yaml.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

func newEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	e, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func reasonCodes(d Decision) []string {
	codes := make([]string, 0, len(d.Reasons))
	for _, r := range d.Reasons {
		codes = append(codes, r.Code)
	}
	return codes
}

func TestDecideDefaultPolicy(t *testing.T) {
	e := newEngine(t, Options{})
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			d := e.Decide(context.Background(), c.input())
			if d.Action != c.Want.Action || d.Executor != c.Want.Executor {
				t.Fatalf("got %s/%s, want %s/%s (reasons %v)", d.Action, d.Executor, c.Want.Action, c.Want.Executor, d.Reasons)
			}
			if got := reasonCodes(d); !slices.Equal(got, c.Want.Reasons) {
				t.Fatalf("reasons %v, want %v", got, c.Want.Reasons)
			}
			if d.PolicyRevision != e.Revision() || len(d.PolicyRevision) != len("sha256:")+64 {
				t.Fatalf("policy_revision %q, want the engine's %q", d.PolicyRevision, e.Revision())
			}
			if d.Obligations.Network {
				t.Fatal("default policy must never grant network")
			}
		})
	}
}

func TestDecideObligations(t *testing.T) {
	e := newEngine(t, Options{})
	in := baseInput("STRICT", "LOW", false)
	in.Request.TimeoutS = 10000
	d := e.Decide(context.Background(), in)
	if d.Obligations.TimeoutS != 300 || d.Obligations.MemoryMB != 512 {
		t.Fatalf("obligations %+v, want timeout clamped to 300 and 512 MB", d.Obligations)
	}
}

func TestDecideOnlyReason(t *testing.T) {
	e := newEngine(t, Options{})
	in := baseInput("STRICT", "LOW", false)
	in.Executors = []string{"subprocess"}
	if d := e.Decide(context.Background(), in); !d.OnlyReason(ReasonExecutorUnavailable) {
		t.Fatalf("want only executor_unavailable, got %v", d.Reasons)
	}
	in.Risk.Level = "CRITICAL"
	if d := e.Decide(context.Background(), in); d.OnlyReason(ReasonExecutorUnavailable) {
		t.Fatalf("a critical deny must not look like a plain unavailability: %v", d.Reasons)
	}
}
