package archtest

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sandgate/sandgate/"

// rule forbids packages matching From to depend (directly or transitively)
// on packages matching To. A pattern ending in "/..." matches the package
// and everything below it.
type rule struct {
	From, To string
	Why      string
}

var leaves = []string{"errcode/...", "risk/...", "policy/...", "confirm/...", "executors/...", "workspace/...", "browser/...", "audit/...", "events/..."}

// frontEnds are the front ends (DESIGN.md §1, §14): each a thin adapter
// over the manager, side by side. api mounts the others on its listener
// through interfaces, and none imports another.
var frontEnds = []string{"api/...", "mcp/...", "deerflow/...", "e2b/...", "daytona/..."}

func rules() []rule {
	rs := []rule{
		{"manager/...", "cmd/...", "wiring happens in main only"},
		{"executors/...", "policy/...", "executors run what was decided; they never decide"},
		{"executors/...", "risk/...", "executors run what was decided; they never decide"},
		{"executors/...", "confirm/...", "executors never ask for approval"},
		{"risk/...", "policy/...", "risk hints feed the policy through the manager, not directly"},
		{"policy/...", "risk/...", "policy sees risk only as input the manager builds"},
		{"policy/...", "executors/...", "policy names executors as strings; it never runs them"},
	}
	for _, fe := range frontEnds {
		rs = append(rs,
			rule{fe, "cmd/...", "cmd is the top: nothing imports main packages"},
			rule{"manager/...", fe, "the manager is driven by the front ends, never the reverse"})
		for _, other := range frontEnds {
			if other != fe {
				rs = append(rs, rule{fe, other, "front ends never import one another: api mounts the others through interfaces, each sits on the manager"})
			}
		}
	}
	for _, leaf := range leaves {
		for _, upper := range append([]string{"manager/...", "cmd/..."}, frontEnds...) {
			rs = append(rs, rule{leaf, upper, "imports flow cmd → api → manager → leaves"})
		}
	}
	return rs
}

func matches(pattern, pkg string) bool {
	rel, ok := strings.CutPrefix(pkg, module)
	if !ok {
		return false
	}
	if base, tree := strings.CutSuffix(pattern, "/..."); tree {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

// violations returns one line per forbidden dependency in graph, which maps
// a package to all its (transitive) dependencies.
func violations(graph map[string][]string, rs []rule) []string {
	var out []string
	for pkg, deps := range graph {
		for _, r := range rs {
			if !matches(r.From, pkg) {
				continue
			}
			for _, d := range deps {
				if matches(r.To, d) {
					out = append(out, pkg+" → "+d+": "+r.Why)
				}
			}
		}
	}
	return out
}

func loadGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Deps", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	graph := make(map[string][]string)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		graph[p.ImportPath] = p.Deps
	}
	return graph
}

func TestImportDirection(t *testing.T) {
	graph := loadGraph(t)
	if len(graph) < 3 {
		t.Fatalf("go list found %d packages; the test is not looking at the module", len(graph))
	}
	for _, v := range violations(graph, rules()) {
		t.Error(v)
	}
}

// TestRulesCatchViolations proves the checker fails on the edges DESIGN.md
// forbids, so TestImportDirection cannot pass vacuously.
func TestRulesCatchViolations(t *testing.T) {
	cases := []struct {
		from, to string
		bad      bool
	}{
		{"executors/subprocess", "manager", true},
		{"executors/docker", "api", true},
		{"executors/subprocess", "policy", true},
		{"policy", "risk", true},
		{"risk", "manager", true},
		{"manager", "api", true},
		{"audit", "manager", true},
		{"api", "manager", false},
		{"manager", "policy", false},
		{"manager", "executors/subprocess", false},
		{"executors/subprocess", "executors", false},
		{"cmd/gateway", "api", false},
		{"mcp", "api", true},
		{"confirm", "mcp", true},
		{"mcp", "manager", false},
		{"cmd/gateway", "mcp", false},
		{"api", "mcp", true},
		{"deerflow", "api", true},
		{"api", "deerflow", true},
		{"mcp", "deerflow", true},
		{"deerflow", "mcp", true},
		{"deerflow", "cmd/gateway", true},
		{"manager", "deerflow", true},
		{"audit", "deerflow", true},
		{"workspace", "deerflow", true},
		{"deerflow", "manager", false},
		{"deerflow", "audit", false},
		{"cmd/gateway", "deerflow", false},
		{"daytona", "e2b", true},
		{"e2b", "daytona", true},
		{"daytona", "api", true},
		{"api", "daytona", true},
		{"manager", "daytona", true},
		{"daytona", "cmd/gateway", true},
		{"daytona", "manager", false},
		{"cmd/gateway", "daytona", false},
	}
	for _, c := range cases {
		graph := map[string][]string{module + c.from: {module + c.to, "fmt"}}
		got := len(violations(graph, rules())) > 0
		if got != c.bad {
			t.Errorf("%s → %s: violation=%v, want %v", c.from, c.to, got, c.bad)
		}
	}
}
