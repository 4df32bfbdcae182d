package risk

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/expr-lang/expr/vm"
)

// Assessor runs the built-in analysis and then the admin rules. It is safe
// for concurrent use; SetRules swaps the rule set atomically on reload.
type Assessor struct {
	rules    atomic.Pointer[RuleSet]
	logger   *slog.Logger
	failures atomic.Uint64
	vms      sync.Pool
}

// NewAssessor returns an Assessor; rules may be nil (built-ins only) and a
// nil logger discards.
func NewAssessor(rules *RuleSet, logger *slog.Logger) *Assessor {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Assessor{logger: logger}
	a.vms.New = func() any { return &vm.VM{MemoryBudget: ruleMemoryBudget} }
	a.rules.Store(rules)
	return a
}

// SetRules replaces the rule set; requests already running keep the old one.
func (a *Assessor) SetRules(rs *RuleSet) { a.rules.Store(rs) }

// RuleFailures counts rule evaluations that failed at run time (and were
// skipped) since the Assessor was created; export it as a metric.
func (a *Assessor) RuleFailures() uint64 { return a.failures.Load() }

// Assess is the package Assess plus admin rules. A rule that fails at run
// time is skipped, logged and counted: one broken rule must not block every
// request. Rules are not run on oversize input, which is CRITICAL already.
func (a *Assessor) Assess(code, language string) (Assessment, error) {
	an, err := analyze(code, language)
	if err != nil {
		return failed(), err
	}
	res := an.assessment()
	rs := a.rules.Load()
	if rs.Len() == 0 || len(code) > MaxAnalyzedSize {
		return res, nil
	}
	env := ruleEnv(an, res)
	m := a.vms.Get().(*vm.VM)
	defer a.vms.Put(m)
	var extra []Pattern
	for i := range rs.rules {
		r := &rs.rules[i]
		out, err := m.Run(r.prog, env)
		if err != nil {
			a.failures.Add(1)
			a.logFailure(rs, r, code, err)
			continue
		}
		if ok, _ := out.(bool); ok {
			extra = append(extra, Pattern{ID: r.id, Message: r.msg, Line: 0, Level: r.level})
		}
	}
	return merge(res, extra), nil
}

// logFailure never logs the code, only its size and a digest prefix that
// lets an operator match the audit record.
func (a *Assessor) logFailure(rs *RuleSet, r *compiledRule, code string, err error) {
	sum := sha256.Sum256([]byte(code))
	a.logger.Warn("risk: admin rule failed at run time; skipped",
		"rule", r.id, "source", rs.source, "error", truncate(err.Error(), maxErrText),
		"code_size", len(code), "code_sha256", hex.EncodeToString(sum[:6]))
}

func ruleEnv(an *analysis, res Assessment) RuleEnv {
	ids := make([]string, 0, len(res.Patterns))
	for _, p := range res.Patterns {
		if len(ids) == 0 || ids[len(ids)-1] != p.ID {
			ids = append(ids, p.ID)
		}
	}
	return RuleEnv{
		Language: an.lang, Code: an.src.norm, CodeLower: asciiLower(an.src.norm),
		Imports: dedupe(an.imports), Calls: dedupe(an.calls),
		Size: len(an.src.orig), Lines: countLines(an.src.orig), Patterns: dedupe(ids),
		Level: res.Level.String(), ProvenSafe: res.ProvenSafe,
	}
}

func dedupe(in []string) []string {
	out := make([]string, 0, min(len(in), maxEnvList))
	seen := make(map[string]bool, len(in))
	for _, s := range in {
		if !seen[s] && len(out) < maxEnvList {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// merge adds rule patterns; hints only escalate, so any rule hit also
// withdraws a SAFE proof.
func merge(res Assessment, extra []Pattern) Assessment {
	if len(extra) == 0 {
		return res
	}
	res.Patterns = append(res.Patterns, extra...)
	sort.SliceStable(res.Patterns, func(i, j int) bool {
		pi, pj := res.Patterns[i], res.Patterns[j]
		if pi.Line != pj.Line {
			return pi.Line < pj.Line
		}
		return pi.ID < pj.ID
	})
	res.ProvenSafe = false
	res.Level = maxLevel(res.Level, LOW)
	for _, p := range extra {
		res.Level = maxLevel(res.Level, p.Level)
	}
	return res
}
