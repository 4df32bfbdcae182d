package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/policy/replay"
	"github.com/sandgate/sandgate/risk"
)

// errPolicyTests is `sandgate policy test`'s failure: a test failed.
var errPolicyTests = errors.New("policy tests failed")

// runPolicy is `gateway policy test|check|diff`: the administrators'
// tools, which need no running gateway.
func runPolicy(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: sandgate policy test DIR | check [flags] | diff --candidate DIR [flags]")
		return errUsage
	}
	switch args[0] {
	case "test":
		return runPolicyTest(ctx, args[1:], stdout, stderr)
	case "check":
		return runPolicyCheck(ctx, args[1:], getenv, stdout, stderr)
	case "diff":
		return runPolicyDiff(ctx, args[1:], getenv, stdout, stderr)
	}
	fmt.Fprintf(stderr, "sandgate policy: unknown command %q (test, check, diff)\n", args[0])
	return errUsage
}

// runPolicyTest is `sandgate policy test DIR [-v] [--json]`: the Rego unit
// tests of DIR against its policy, with the gateway's schemas and compiler
// settings (policy.RunTests). It fails when a test fails or errs.
func runPolicyTest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("policy test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "list every test, not only the failures")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	timeout := fs.Duration("timeout", 30*time.Second, "bound for the whole run")
	dir, rest := firstArg(args)
	if err := fs.Parse(rest); err != nil {
		return errUsage
	}
	if dir == "" && fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	if dir == "" {
		fmt.Fprintln(stderr, "usage: sandgate policy test DIR [-v] [--json]")
		return errUsage
	}
	res, err := policy.RunTests(ctx, os.DirFS(dir), *timeout)
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range res {
		if !r.Pass && !r.Skip {
			failed++
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		for _, r := range res {
			switch {
			case r.Error != "":
				fmt.Fprintf(stdout, "ERROR %s.%s (%s:%d): %s\n", r.Package, r.Name, r.File, r.Row, r.Error)
			case r.Skip:
				if *verbose {
					fmt.Fprintf(stdout, "SKIP  %s.%s\n", r.Package, r.Name)
				}
			case !r.Pass:
				fmt.Fprintf(stdout, "FAIL  %s.%s (%s:%d)\n", r.Package, r.Name, r.File, r.Row)
			case *verbose:
				fmt.Fprintf(stdout, "PASS  %s.%s (%s)\n", r.Package, r.Name, r.Duration.Round(time.Microsecond))
			}
		}
		fmt.Fprintf(stdout, "%d tests, %d passed, %d failed\n", len(res), len(res)-failed, failed)
	}
	switch {
	case failed > 0:
		return fmt.Errorf("%w: %d of %d", errPolicyTests, failed, len(res))
	case len(res) == 0:
		return fmt.Errorf("%w: no tests found in %s (files named *_test.rego)", errPolicyTests, dir)
	}
	return nil
}

// firstArg splits off a leading positional argument (flags may follow it).
func firstArg(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "", args
}

// policyTarget is where the tools find a policy: --policy (a folder or a
// bundle file), else the configuration's policy.dir, else the policy the
// binary embeds. A gateway whose policy comes from bundles has no folder:
// --policy is then required.
func policyTarget(ctx context.Context, flagVal string, cfg Config) (*policy.Engine, string, error) {
	opts := policy.Options{EvalTimeout: cfg.Policy.EvalTimeout}
	switch {
	case flagVal != "":
		return policy.OpenPath(ctx, flagVal, opts)
	case cfg.Policy.Source == policy.SourceBundle:
		return nil, "", errors.New("the configured policy comes from bundles: name the folder or bundle file with --policy")
	case cfg.Policy.Dir != "":
		return policy.OpenPath(ctx, cfg.Policy.Dir, opts)
	}
	e, err := policy.New(ctx, opts)
	return e, "", err
}

// executorStates is input.executors for the tools: the `executors` object
// of GET /v1/policy saved to a file, or, without one, every executor kind
// available with every capability, so that the policy's own logic decides.
func executorStates(path string) (map[string]policy.ExecutorState, error) {
	out := map[string]policy.ExecutorState{}
	if path == "" {
		all := executors.Capabilities{NetworkIsolation: true, NetworkGrant: true, MemoryLimit: true, ProcessLimit: true,
			KillDetached: true, FilesystemIsolation: true, Kernels: true}.Map()
		for _, kind := range []string{"subprocess", "docker", "gvisor", "aio"} {
			out[kind] = policy.ExecutorState{Available: true, Capabilities: all}
		}
		return out, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--executors: %w", err)
	}
	var doc map[string]manager.ExecutorStatus
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("--executors %s: want the executors object of GET /v1/policy: %w", path, err)
	}
	for kind, st := range doc {
		out[kind] = policy.ExecutorState{Available: st.Available, Reason: st.Reason, Capabilities: st.Capabilities.Map()}
	}
	return out, nil
}

// checkOutput is what `sandgate policy check --json` prints.
type checkOutput struct {
	Revision       string          `json:"revision"`
	BundleRevision string          `json:"bundle_revision,omitempty"`
	Risk           risk.Assessment `json:"risk"`
	Decision       policy.Decision `json:"decision"`
}

// runPolicyCheck is `sandgate policy check [--policy DIR|BUNDLE] --code
// CODE|--file FILE [--language L] [--tenant T] ...`: the risk assessment
// and the decision for a would-be request, as POST /v1/policy/evaluate
// gives them, from a folder or a bundle, with no gateway running.
func runPolicyCheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("policy check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pol := fs.String("policy", "", "policy folder or bundle file (default: the configuration's policy.dir, else the embedded policy)")
	code := fs.String("code", "", "the code or command to check")
	file := fs.String("file", "", "read the code from this file")
	lang := fs.String("language", "python", "python, bash or javascript")
	kind := fs.String("kind", manager.KindRunCode, "run_code or execute")
	tenant := fs.String("tenant", "default", "the tenant that owns the session")
	role := fs.String("role", "agent", "the caller's role")
	name := fs.String("principal", "cli", "the caller's token name")
	session := fs.String("session", "check", "the session id")
	timeoutS := fs.Int("timeout-s", 0, "the requested timeout (0: limits.default_timeout)")
	stateful := fs.Bool("stateful", false, "a cell of the session's kernel")
	needsBrowser := fs.Bool("needs-browser", false, "context.needs_browser")
	needsFS := fs.Bool("needs-persistent-fs", false, "context.needs_persistent_fs")
	execFile := fs.String("executors", "", "the executors object of GET /v1/policy, as JSON (default: all available, all capabilities)")
	asJSON := fs.Bool("json", false, "print the risk and the decision as JSON")
	input := fs.String("input", "", "a raw input document (JSON, as policy/schemas describe it) to decide instead of --code: a file, or - for stdin")
	decision := fs.String("decision", "", "with --input: exec, browser or egress (default: the one schema the document is valid under)")
	rest, gwFlags := splitGatewayFlags(args)
	if err := fs.Parse(rest); err != nil {
		return errUsage
	}
	cfg, err := loadConfig(gwFlags, getenv, stderr)
	if err != nil {
		return err
	}
	if *input != "" {
		if *code != "" || *file != "" {
			fmt.Fprintln(stderr, "sandgate policy check: --input is a whole input document; it does not take --code or --file")
			return errUsage
		}
		return checkInputDocument(ctx, *input, *decision, *pol, cfg, *asJSON, stdout)
	}
	src := *code
	if *file != "" {
		b, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		src = string(b)
	}
	if src == "" {
		fmt.Fprintln(stderr, "usage: sandgate policy check --code CODE | --file FILE | --input FILE|- [--decision exec|browser|egress] [--language L] [--policy DIR|BUNDLE] [--tenant T] [--json]")
		return errUsage
	}
	var rules *risk.RuleSet
	if cfg.Risk.RulesFile != "" {
		if rules, err = risk.LoadRules(cfg.Risk.RulesFile); err != nil {
			return fmt.Errorf("risk rules: %w", err)
		}
	}
	a, err := risk.NewAssessor(rules, nil).Assess(src, *lang)
	if err != nil {
		return fmt.Errorf("risk: %w", err)
	}
	e, bundleRev, err := policyTarget(ctx, *pol, cfg)
	if err != nil {
		return err
	}
	execs, err := executorStates(*execFile)
	if err != nil {
		return err
	}
	t := *timeoutS
	if t <= 0 {
		t = int(cfg.Limits.DefaultTimeout / time.Second)
	}
	in := policy.Input{
		Mode: cfg.Mode,
		Request: policy.Request{Kind: *kind, SessionID: *session, Language: *lang, CodeBytes: len(src),
			CodeSHA256: policy.SHA256Hex([]byte(src)), TimeoutS: t, Stateful: *stateful,
			Context: policy.Context{NeedsBrowser: *needsBrowser, NeedsPersistentFS: *needsFS}},
		Risk:      riskInput(a),
		Principal: policy.Principal{Role: *role, Name: *name, Tenant: *tenant},
		Executors: execs,
	}
	d := e.Decide(ctx, in)
	d.DecisionID = "" // nothing was logged under it
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(checkOutput{Revision: d.PolicyRevision, BundleRevision: bundleRev, Risk: a, Decision: d})
	}
	fmt.Fprintf(stdout, "risk %s", a.Level)
	for _, p := range a.Patterns {
		fmt.Fprintf(stdout, " · %s (line %d)", p.ID, p.Line)
	}
	fmt.Fprintf(stdout, "\ndecision %s (executor %s)", d.Action, d.Executor)
	if d.WouldBe != "" {
		fmt.Fprintf(stdout, ", would be %s if enforced", d.WouldBe)
	}
	fmt.Fprintf(stdout, "\n")
	for _, r := range d.Reasons {
		mode := ""
		if r.Enforcement != "" {
			mode = " [" + r.Enforcement + "]"
		}
		fmt.Fprintf(stdout, "  %s%s: %s\n", r.Code, mode, r.Message)
	}
	o := d.Obligations
	fmt.Fprintf(stdout, "obligations network=%t timeout_s=%d memory_mb=%d max_procs=%d\npolicy %s", o.Network, o.TimeoutS, o.MemoryMB, o.MaxProcs, d.PolicyRevision)
	if bundleRev != "" {
		fmt.Fprintf(stdout, " (bundle revision %s)", bundleRev)
	}
	fmt.Fprintln(stdout)
	return nil
}

func riskInput(a risk.Assessment) policy.Risk {
	r := policy.Risk{Level: a.Level.String(), ProvenSafe: a.ProvenSafe}
	for _, p := range a.Patterns {
		r.Patterns = append(r.Patterns, policy.RiskPattern{ID: p.ID, Level: p.Level.String(), Line: p.Line})
	}
	return r
}

// gatewayFlags are the flags the tools pass on to loadConfig, so they read
// the gateway's configuration (mode, policy.dir, limits, the database) as
// the gateway would.
var gatewayFlags = []string{"config", "listen", "mode", "data-dir", "policy-dir"}

// splitGatewayFlags separates the gateway's own flags from a tool's.
func splitGatewayFlags(args []string) (tool, gw []string) {
	rest := args
	for _, name := range gatewayFlags {
		var v string
		v, rest = cutFlag(rest, name)
		if v != "" {
			gw = append(gw, "--"+name, v)
		}
	}
	return rest, gw
}

// diffChange is one record the candidate would decide otherwise.
type diffChange struct {
	RecordID   int64     `json:"record_id"`
	Time       time.Time `json:"time"`
	DecisionID string    `json:"decision_id,omitempty"`
	Kind       string    `json:"kind"`
	Tenant     string    `json:"tenant"`
	SessionID  string    `json:"session_id"`
	RiskLevel  string    `json:"risk_level"`
	// Recorded is what the record says was decided; Baseline what the
	// baseline policy decides on the replayed input; Candidate what the
	// candidate decides on it.
	Recorded  diffSide `json:"recorded"`
	Baseline  diffSide `json:"baseline"`
	Candidate diffSide `json:"candidate"`
	// Reproduced: the baseline's replay matches the record, so the change
	// is the candidate's. When false the record was decided by another
	// revision, or by what the record does not keep (see README).
	Reproduced bool `json:"reproduced"`
}

type diffSide struct {
	Action   string   `json:"action"`
	Executor string   `json:"executor,omitempty"`
	WouldBe  string   `json:"would_be,omitempty"`
	Reasons  []string `json:"reasons,omitempty"`
}

// diffReport is what `sandgate policy diff --json` prints.
type diffReport struct {
	Baseline      string       `json:"baseline"`
	Candidate     string       `json:"candidate"`
	Since         time.Time    `json:"since,omitzero"`
	Replayed      int          `json:"replayed"`
	NotReproduced int          `json:"not_reproduced"`
	Changed       []diffChange `json:"changed"`
}

// runPolicyDiff is `sandgate policy diff --candidate DIR|BUNDLE [--baseline
// DIR|BUNDLE] [--since 24h|RFC3339] [--tenant T] [--limit N] [--executors
// FILE] [--json] [gateway flags]`: it replays the run_code and execute
// records of a window of the audit log (the configured database) against
// the candidate and prints the records whose decision would change.
//
// What is replayed is the policy input the record allows reconstructing:
// mode (the configuration's), request kind, session, language, code size
// and SHA-256, stateful (detail), risk level and pattern ids, principal
// role, name and tenant. The record does not keep the requested timeout
// (the configuration's default is used), the context flags (false), the
// patterns' levels and lines, or the executors' state (--executors, else
// all available). The baseline (the configuration's policy unless
// --baseline) is replayed too: a record it does not reproduce is marked,
// since its change may come from what the record lacks.
func runPolicyDiff(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("policy diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	candidate := fs.String("candidate", "", "the candidate policy: a folder or a bundle file (required)")
	baseline := fs.String("baseline", "", "the policy the records are compared under (default: the configuration's)")
	since := fs.String("since", "24h", "the window: a duration back from now, or an RFC 3339 time")
	tenant := fs.String("tenant", "", "only this tenant's records")
	limit := fs.Int("limit", 10000, "replay at most this many records, newest first")
	execFile := fs.String("executors", "", "the executors object of GET /v1/policy, as JSON (default: all available, all capabilities)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	rest, gwFlags := splitGatewayFlags(args)
	if err := fs.Parse(rest); err != nil {
		return errUsage
	}
	if *candidate == "" {
		fmt.Fprintln(stderr, "usage: sandgate policy diff --candidate DIR|BUNDLE [--baseline DIR|BUNDLE] [--since 24h] [--json] [--config FILE]")
		return errUsage
	}
	from, err := parseSince(*since, time.Now())
	if err != nil {
		return err
	}
	cfg, err := loadConfig(gwFlags, getenv, stderr)
	if err != nil {
		return err
	}
	base, _, err := policyTarget(ctx, *baseline, cfg)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	cand, _, err := policy.OpenPath(ctx, *candidate, policy.Options{EvalTimeout: cfg.Policy.EvalTimeout})
	if err != nil {
		return fmt.Errorf("candidate: %w", err)
	}
	execs, err := executorStates(*execFile)
	if err != nil {
		return err
	}
	gw := &gateway{cfg: cfg, log: newLogger("warn", stderr)}
	db, err := gw.openStorage(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	recs, err := replay.Window(ctx, db, audit.Query{Tenant: *tenant, Since: from}, *limit, replay.IsExec)
	if err != nil {
		return err
	}
	rep := diffReport{Baseline: base.Status().Source, Candidate: *candidate, Since: from, Changed: []diffChange{}}
	defaultTimeout := int(cfg.Limits.DefaultTimeout / time.Second)
	for _, rec := range recs {
		in := replay.ExecInput(rec, cfg.Mode, defaultTimeout)
		in.Executors = execs
		b, c := base.Decide(ctx, in), cand.Decide(ctx, in)
		recorded := diffSide{Action: rec.Action, Executor: rec.Executor, WouldBe: rec.WouldBe}
		for _, r := range rec.Reasons {
			recorded.Reasons = append(recorded.Reasons, r.Code)
		}
		bs, cs := sideOf(b), sideOf(c)
		reproduced := sameDecision(recorded, bs)
		rep.Replayed++
		if !reproduced {
			rep.NotReproduced++
		}
		if sameDecision(recorded, cs) {
			continue
		}
		rep.Changed = append(rep.Changed, diffChange{RecordID: rec.ID, Time: rec.Time, DecisionID: rec.DecisionID, Kind: rec.Kind,
			Tenant: rec.Tenant, SessionID: rec.SessionID, RiskLevel: rec.RiskLevel, Recorded: recorded, Baseline: bs,
			Candidate: cs, Reproduced: reproduced})
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "replayed %d run_code/execute records since %s against %s (baseline %s)\n",
		rep.Replayed, from.Format(time.RFC3339), *candidate, rep.Baseline)
	for _, ch := range rep.Changed {
		note := ""
		if !ch.Reproduced {
			note = "  (baseline replay differs from the record: " + ch.Baseline.Action + ")"
		}
		fmt.Fprintf(stdout, "record %d  %s  %s/%s  %s risk %s: %s -> %s [%s]%s\n", ch.RecordID, ch.Time.Format(time.RFC3339),
			ch.Tenant, ch.SessionID, ch.Kind, ch.RiskLevel, describe(ch.Recorded), describe(ch.Candidate),
			strings.Join(ch.Candidate.Reasons, ","), note)
	}
	fmt.Fprintf(stdout, "%d would change; %d of %d replays differ from their record under the baseline\n",
		len(rep.Changed), rep.NotReproduced, rep.Replayed)
	return nil
}

func describe(s diffSide) string {
	out := s.Action
	if s.Executor != "" && s.Action != policy.ActionDeny {
		out += " on " + s.Executor
	}
	if s.WouldBe != "" {
		out += " (would be " + s.WouldBe + ")"
	}
	return out
}

func sideOf(d policy.Decision) diffSide {
	s := diffSide{Action: d.Action, Executor: d.Executor, WouldBe: d.WouldBe}
	for _, r := range d.Reasons {
		s.Reasons = append(s.Reasons, r.Code)
	}
	return s
}

// sameDecision compares what an audit record keeps of a decision: the
// action, the would-be action, and the executor of a run that was not
// denied (a deny's executor is not stable: "none", or the table's).
func sameDecision(a, b diffSide) bool {
	if a.Action != b.Action || a.WouldBe != b.WouldBe {
		return false
	}
	return a.Action == policy.ActionDeny || a.Executor == b.Executor
}

// parseSince reads a duration back from now or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration (24h) or an RFC 3339 time", s)
	}
	return t, nil
}
