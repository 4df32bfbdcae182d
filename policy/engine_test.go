package policy

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"

	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/internal/policytest"
)

type decideCase struct {
	Name              string `yaml:"name"`
	Mode              string `yaml:"mode"`
	Level             string `yaml:"level"`
	ProvenSafe        bool   `yaml:"proven_safe"`
	Language          string `yaml:"language"`
	NeedsBrowser      bool   `yaml:"needs_browser"`
	NeedsPersistentFS bool   `yaml:"needs_persistent_fs"`
	// Available lists the kinds that are wired and available, with full
	// capabilities (default: all three). Others are absent.
	Available []string `yaml:"available"`
	// Unavailable maps a kind to the reason it is wired but unavailable.
	Unavailable map[string]string `yaml:"unavailable"`
	// Caps maps a kind to capability values that replace the full ones.
	Caps map[string]map[string]any `yaml:"caps"`
	Want struct {
		Action   string   `yaml:"action"`
		Executor string   `yaml:"executor"`
		Reasons  []string `yaml:"reasons"`
		// Messages, when set, are the reasons' messages in order.
		Messages []string `yaml:"messages"`
	} `yaml:"want"`
}

func (c decideCase) input() Input {
	in := baseInput(c.Mode, c.Level, c.ProvenSafe)
	if c.Language != "" {
		in.Request.Language = c.Language
	}
	in.Request.Context = Context{NeedsBrowser: c.NeedsBrowser, NeedsPersistentFS: c.NeedsPersistentFS}
	if c.Available != nil {
		in.Executors = executorStates(c.Available...)
	}
	for kind, why := range c.Unavailable {
		in.Executors[kind] = ExecutorState{Reason: why, Capabilities: fullCaps()}
	}
	for kind, caps := range c.Caps {
		st := in.Executors[kind]
		maps.Copy(st.Capabilities, caps)
		in.Executors[kind] = st
	}
	return in
}

// fullCaps can enforce every obligation of the default policy, as the
// executors.Capabilities.Map of a production backend.
func fullCaps() map[string]any {
	return map[string]any{
		"network_isolation": true, "network_grant": false, "memory_limit": true, "process_limit": true,
		"kill_detached": true, "filesystem_isolation": true, "kernels": false, "requires_session": false,
		"root_fs": "host", "isolation": "namespaces",
	}
}

// executorStates has the given kinds available with full capabilities.
func executorStates(kinds ...string) map[string]ExecutorState {
	out := make(map[string]ExecutorState, len(kinds))
	for _, k := range kinds {
		out[k] = ExecutorState{Available: true, Capabilities: fullCaps()}
	}
	return out
}

func baseInput(mode, level string, proven bool) Input {
	return Input{
		Mode: mode,
		Request: Request{Kind: "run_code", SessionID: "s-1", Language: "python",
			CodeBytes: 9, CodeSHA256: SHA256Hex([]byte("print(1)\n")), TimeoutS: 30},
		Risk:      Risk{Level: level, ProvenSafe: proven, Patterns: []RiskPattern{{ID: "x.y", Level: level, Line: 1}}},
		Principal: Principal{Role: "agent", Name: "agent"},
		Executors: executorStates("subprocess", "docker", "aio"),
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

// treeWithEgress is the shipped policy tree with its data's
// config.egress changed by edit (rules, network_modes, ...).
func treeWithEgress(t testing.TB, edit func(egress map[string]any)) fstest.MapFS {
	t.Helper()
	fsys, err := DefaultTree()
	if err != nil {
		t.Fatal(err)
	}
	const p = "sandgate/config/data.json"
	var doc map[string]any
	if err := json.Unmarshal(fsys[p].Data, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc["egress"].(map[string]any))
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	fsys[p] = &fstest.MapFile{Data: data}
	return fsys
}

// newEngine builds an engine for a test. Its evaluation budget defaults to
// policytest.EvalTimeout, not the shipped 500 ms: under -race beside the
// rest of make test an evaluation now and then waited longer than that for
// a CPU and failed closed (policy.timeout). The timeout's own case
// (failclosed_test.go) sets a bound of its own.
func newEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	if opts.EvalTimeout == 0 {
		opts.EvalTimeout = policytest.EvalTimeout
	}
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
			for i, msg := range c.Want.Messages {
				if d.Reasons[i].Message != msg {
					t.Errorf("reason %d: message %q, want %q", i, d.Reasons[i].Message, msg)
				}
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
	if d.Obligations.TimeoutS != 300 || d.Obligations.MemoryMB != 512 || d.Obligations.MaxProcs != 128 {
		t.Fatalf("obligations %+v, want timeout clamped to 300, 512 MB and 128 processes", d.Obligations)
	}
}

func TestDecideOnlyReason(t *testing.T) {
	e := newEngine(t, Options{})
	in := baseInput("STRICT", "LOW", false)
	in.Executors = executorStates("subprocess")
	if d := e.Decide(context.Background(), in); !d.OnlyReason(ReasonExecutorUnavailable) {
		t.Fatalf("want only executor_unavailable, got %v", d.Reasons)
	}
	in.Risk.Level = "CRITICAL"
	if d := e.Decide(context.Background(), in); d.OnlyReason(ReasonExecutorUnavailable) {
		t.Fatalf("a critical deny must not look like a plain unavailability: %v", d.Reasons)
	}
}
