package risk

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
	"go.yaml.in/yaml/v3"
)

// Budgets for admin rules. Rules are written by administrators, not
// agents, but a typo such as a 20k-term expression or 1..1e7 must not take
// the gateway down: MaxNodes bounds compilation, the VM memory budget
// bounds evaluation, and the size caps keep error messages readable.
const (
	maxRuleNodes     = 1000
	ruleMemoryBudget = 200_000 // expr VM allocation units (conf.DefaultMemoryBudget is 1e6)
	maxRules         = 500
	maxWhenLen       = 16 << 10
	maxErrText       = 240
	maxEnvList       = 256
)

// Rule is one admin rule as written in YAML: when the expr expression
// `when` is true, a pattern `id` with the given level and message is added.
type Rule struct {
	ID      string `yaml:"id"`
	Level   string `yaml:"level"`
	Message string `yaml:"message"`
	When    string `yaml:"when"`
}

// RuleEnv is what a rule's expression sees. Code is NFKC-normalised and
// CodeLower is that text with ASCII letters lowered (prefer
// `code_lower contains "x"` to a (?i) regex). Imports and Calls come from the
// tokenizer, deduplicated and capped at 256 entries; Calls hold resolved
// dotted names ("subprocess.run", ".append" for a method on an expression).
// Patterns are the built-in ids that fired; Level is the built-in level.
type RuleEnv struct {
	Language   string   `expr:"language"`
	Code       string   `expr:"code"`
	CodeLower  string   `expr:"code_lower"`
	Imports    []string `expr:"imports"`
	Calls      []string `expr:"calls"`
	Size       int      `expr:"size"`
	Lines      int      `expr:"lines"`
	Patterns   []string `expr:"patterns"`
	Level      string   `expr:"level"`
	ProvenSafe bool     `expr:"proven_safe"`
}

type compiledRule struct {
	id    string
	level Level
	msg   string
	prog  *vm.Program
}

// RuleSet is a compiled, immutable set of admin rules, safe for concurrent
// use. Compiled programs are shared; each evaluation uses its own VM.
type RuleSet struct {
	source string
	rules  []compiledRule
}

// Len returns the number of rules.
func (rs *RuleSet) Len() int {
	if rs == nil {
		return 0
	}
	return len(rs.rules)
}

// Source names where the rules came from (a path, or what the caller said).
func (rs *RuleSet) Source() string { return rs.source }

// LoadRules reads and compiles a rules file. Any invalid rule fails the
// whole load, so a reload keeps the last good set rather than a partial one.
func LoadRules(path string) (*RuleSet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("risk: read rules: %w", err)
	}
	return ParseRules(data, path)
}

// ParseRules parses YAML (a list of {id, level, message, when}) and compiles
// every rule. All problems are reported at once, each naming its rule.
func ParseRules(data []byte, source string) (*RuleSet, error) {
	var rules []Rule
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("risk: rules %s: %w", source, err)
	}
	if len(rules) > maxRules {
		return nil, fmt.Errorf("risk: rules %s: %d rules, at most %d allowed", source, len(rules), maxRules)
	}
	rs := &RuleSet{source: source, rules: make([]compiledRule, 0, len(rules))}
	var errs []error
	seen := make(map[string]bool, len(rules))
	for i, r := range rules {
		cr, err := compileRule(r, seen)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %d %q: %w", i+1, truncate(r.ID, 64), err))
			continue
		}
		rs.rules = append(rs.rules, cr)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("risk: rules %s: %w", source, errors.Join(errs...))
	}
	return rs, nil
}

var ruleIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,99}$`)

func compileRule(r Rule, seen map[string]bool) (compiledRule, error) {
	switch {
	case !ruleIDPattern.MatchString(r.ID):
		return compiledRule{}, errors.New("id must match [a-z0-9][a-z0-9_.-]{0,99}")
	case seen[r.ID]:
		return compiledRule{}, errors.New("duplicate id")
	case catalog[r.ID] != (def{}):
		return compiledRule{}, errors.New("id is a built-in pattern id")
	case r.When == "":
		return compiledRule{}, errors.New("empty when")
	case len(r.When) > maxWhenLen:
		return compiledRule{}, fmt.Errorf("when longer than %d bytes", maxWhenLen)
	}
	seen[r.ID] = true
	lvl, err := ParseLevel(r.Level)
	if err != nil {
		return compiledRule{}, err
	}
	if lvl == SAFE {
		return compiledRule{}, errors.New("level SAFE: rules can only escalate")
	}
	prog, err := expr.Compile(r.When, expr.Env(RuleEnv{}), expr.AsBool(), expr.MaxNodes(maxRuleNodes))
	if err != nil {
		// expr errors quote the source, which can be huge; keep the gist.
		return compiledRule{}, fmt.Errorf("compile: %s", truncate(err.Error(), maxErrText))
	}
	msg := r.Message
	if msg == "" {
		msg = r.ID
	}
	return compiledRule{id: r.ID, level: lvl, msg: msg, prog: prog}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
