package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// formsDryrun is an administrator's browser rule rolled out in dry run.
var formsDryrun = map[string]string{
	"sandgate/browser/forms.rego": `package sandgate.browser

deny_reasons contains reason("browser.forms", "forms.example is off limits") if input.request.host == "forms.example"
`,
	"sandgate/config/enforcement/data.json": `{"rules": {"browser.forms": "dryrun"}}`,
}

// TestPolicyCheckInput: `sandgate policy check --input` decides the raw
// input documents of testdata/check, each under the decision its schema
// names, from a folder and from the same policy as a bundle file, and
// refuses documents the gateway could never send.
func TestPolicyCheckInput(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "policy")
	writePolicyTree(t, dir, formsDryrun)
	bundleFile := filepath.Join(tmp, "policy.tar.gz")
	if err := os.WriteFile(bundleFile, buildTestBundle(t, dir, "rev-9"), 0o644); err != nil {
		t.Fatal(err)
	}
	td := func(name string) string { return filepath.Join("testdata", "check", name) }
	cases := []struct {
		name, input, decision string
		stdin                 string // the file fed to --input -
		kind, action, wouldBe string
		code                  string // a reason the decision must list
	}{
		{name: "exec critical, detected", input: td("exec_critical.json"), kind: "exec", action: "deny", code: "risk.critical"},
		{name: "exec safe, named", input: td("exec_safe.json"), decision: "exec", kind: "exec", action: "allow"},
		{name: "browser metadata address", input: td("browser_metadata.json"), kind: "browser", action: "deny", code: "browser.blocked_address"},
		{name: "browser rule in dry run", input: td("browser_forms_dryrun.json"), kind: "browser", action: "allow", wouldBe: "deny", code: "browser.forms"},
		{name: "egress to loopback", input: td("egress_loopback.json"), decision: "egress", kind: "egress", action: "deny", code: "egress.blocked_address"},
		{name: "stdin", input: "-", stdin: td("browser_metadata.json"), kind: "browser", action: "deny", code: "browser.blocked_address"},
	}
	for _, target := range []string{dir, bundleFile} {
		for _, c := range cases {
			t.Run(filepath.Base(target)+"/"+c.name, func(t *testing.T) {
				if c.stdin != "" {
					f, err := os.Open(c.stdin)
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					policyStdin = f
					defer func() { policyStdin = os.Stdin }()
				}
				args := []string{"policy", "check", "--policy", target, "--input", c.input, "--json"}
				if c.decision != "" {
					args = append(args, "--decision", c.decision)
				}
				var stdout, stderr syncBuf
				if err := run(context.Background(), args, noEnv, &stdout, &stderr); err != nil {
					t.Fatalf("check: %v %s", err, stderr.String())
				}
				var out struct {
					BundleRevision string `json:"bundle_revision"`
					Kind           string
					Decision       struct {
						Action  string `json:"action"`
						WouldBe string `json:"would_be"`
						Reasons []struct{ Code, Enforcement string }
					}
				}
				if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
					t.Fatalf("output: %v %s", err, stdout.String())
				}
				d := out.Decision
				if out.Kind != c.kind || d.Action != c.action || d.WouldBe != c.wouldBe {
					t.Fatalf("got %s %s (would be %q), want %s %s (%q): %s", out.Kind, d.Action, d.WouldBe, c.kind, c.action, c.wouldBe, stdout.String())
				}
				found := c.code == ""
				for _, r := range d.Reasons {
					found = found || r.Code == c.code
				}
				if !found {
					t.Fatalf("reasons %+v, want %s", d.Reasons, c.code)
				}
				if (target == bundleFile) != (out.BundleRevision == "rev-9") {
					t.Fatalf("bundle revision %q from %s", out.BundleRevision, target)
				}
			})
		}
	}

	t.Run("text", func(t *testing.T) {
		var stdout, stderr syncBuf
		err := run(context.Background(), []string{"policy", "check", "--policy", dir, "--input", td("browser_forms_dryrun.json")}, noEnv, &stdout, &stderr)
		if err != nil || !strings.Contains(stdout.String(), "browser decision allow, would be deny if enforced") ||
			!strings.Contains(stdout.String(), "browser.forms [dryrun]: forms.example is off limits") {
			t.Fatalf("%v\n%s", err, stdout.String())
		}
	})

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"a field the gateway never sends", []string{"--input", td("exec_with_code.json")}, `additional properties ["code"]`},
		{"not JSON", []string{"--input", td("not_json.json")}, "invalid input document"},
		{"the wrong schema", []string{"--input", td("exec_safe.json"), "--decision", "browser"}, "browser input"},
		{"an unknown decision", []string{"--input", td("exec_safe.json"), "--decision", "files"}, `unknown decision "files"`},
		{"a missing file", []string{"--input", td("absent.json")}, "--input"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr syncBuf
			err := run(context.Background(), append([]string{"policy", "check", "--policy", dir}, c.args...), noEnv, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	var stdout, stderr syncBuf
	if err := run(context.Background(), []string{"policy", "check", "--input", td("exec_safe.json"), "--code", "print(1)"}, noEnv, &stdout, &stderr); !errors.Is(err, errUsage) {
		t.Fatalf("--input with --code: %v", err)
	}
}
