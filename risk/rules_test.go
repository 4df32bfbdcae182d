package risk

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestRulesExample(t *testing.T) {
	rs, err := LoadRules("rules.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if rs.Len() != 3 {
		t.Fatalf("%d rules, want 3", rs.Len())
	}
	a := NewAssessor(rs, nil)
	cases := []struct {
		lang, code string
		want       Level
		id         string
	}{
		{"python", "import requests\nrequests.get('http://169.254.169.254/latest/meta-data/')", HIGH, "org.cloud_metadata"},
		{"bash", "./xmrig -o stratum+tcp://pool:3333", CRITICAL, "org.crypto_miner"},
		{"python", "import os\nprint(os.getenv('TOKEN'))", MEDIUM, "org.python.env_secrets"},
		{"python", "print(1)", SAFE, ""},
	}
	for _, tc := range cases {
		got, err := a.Assess(tc.code, tc.lang)
		if err != nil {
			t.Fatal(err)
		}
		if got.Level != tc.want {
			t.Errorf("%q: level %v, want %v (%v)", tc.code, got.Level, tc.want, got.Patterns)
		}
		if tc.id != "" && !hasPattern(got, tc.id) {
			t.Errorf("%q: missing %s in %v", tc.code, tc.id, got.Patterns)
		}
		checkInvariants(t, tc.code, got)
	}
	if a.RuleFailures() != 0 {
		t.Fatalf("unexpected rule failures: %d", a.RuleFailures())
	}
}

func hasPattern(a Assessment, id string) bool {
	for _, p := range a.Patterns {
		if p.ID == id {
			return true
		}
	}
	return false
}

func TestRulesLoadErrorsNameEveryRule(t *testing.T) {
	src := `
- id: ok.rule
  level: LOW
  when: size > 10
- id: bad.syntax
  level: HIGH
  when: 'code contains'
- id: bad.field
  level: HIGH
  when: langauge == "python"
- id: ok.rule
  level: LOW
  when: size > 1
- id: bad.level
  level: SEVERE
  when: size > 1
- id: safe.level
  level: SAFE
  when: size > 1
- id: empty.when
  level: LOW
- id: not.bool
  level: LOW
  when: size + 1
- id: python.process.subprocess
  level: LOW
  when: size > 1
`
	_, err := ParseRules([]byte(src), "inline.yaml")
	if err == nil {
		t.Fatal("expected an error")
	}
	msg := err.Error()
	for _, want := range []string{"inline.yaml", "bad.syntax", "bad.field", `"ok.rule": duplicate id`, "bad.level",
		"safe.level", "empty.when", "not.bool", "python.process.subprocess"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
}

func TestRulesStrictYAML(t *testing.T) {
	_, err := ParseRules([]byte("- id: x\n  level: LOW\n  when: size > 1\n  severity: HIGH\n"), "s.yaml")
	if err == nil || !strings.Contains(err.Error(), "severity") {
		t.Fatalf("unknown field accepted: %v", err)
	}
	rs, err := ParseRules(nil, "empty.yaml")
	if err != nil || rs.Len() != 0 {
		t.Fatalf("empty file: %v %v", rs, err)
	}
}

func TestRulesMaxNodes(t *testing.T) {
	terms := make([]string, 1200)
	for i := range terms {
		terms[i] = fmt.Sprintf("size>%d", i)
	}
	src := fmt.Sprintf("- id: huge.rule\n  level: LOW\n  when: %q\n", strings.Join(terms, "||"))
	_, err := ParseRules([]byte(src), "huge.yaml")
	if err == nil || !strings.Contains(err.Error(), "huge.rule") || !strings.Contains(err.Error(), "nodes") {
		t.Fatalf("want a node-budget error naming the rule, got %v", err)
	}
	if len(err.Error()) > 1000 {
		t.Fatalf("error text not truncated: %d bytes", len(err.Error()))
	}
}

func TestRulesRuntimeFailureSkipped(t *testing.T) {
	src := `
- id: index.out.of.range
  level: HIGH
  when: imports[5] == "os"
- id: memory.hog
  level: HIGH
  when: 'len(map(1..size*100000, # + 1)) > 0' 
- id: still.works
  level: MEDIUM
  when: language == "python"
`
	rs, err := ParseRules([]byte(src), "rt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	a := NewAssessor(rs, slog.New(slog.NewTextHandler(&logs, nil)))
	code := "print('top secret payload')"
	got, err := a.Assess(code, "python")
	if err != nil {
		t.Fatal(err)
	}
	if got.Level != MEDIUM || !hasPattern(got, "still.works") || hasPattern(got, "index.out.of.range") {
		t.Fatalf("got %+v", got)
	}
	if got.ProvenSafe {
		t.Fatal("a rule hit must withdraw the SAFE proof")
	}
	if a.RuleFailures() != 2 {
		t.Fatalf("RuleFailures = %d, want 2", a.RuleFailures())
	}
	if strings.Contains(logs.String(), "top secret") {
		t.Fatal("the code leaked into the logs")
	}
	if !strings.Contains(logs.String(), "index.out.of.range") || !strings.Contains(logs.String(), "code_sha256") {
		t.Fatalf("log lacks rule id or digest: %s", logs.String())
	}
}

func TestAssessorSetRulesConcurrent(t *testing.T) {
	rs1, err := ParseRules([]byte("- id: r.one\n  level: LOW\n  when: size > 0\n"), "1")
	if err != nil {
		t.Fatal(err)
	}
	rs2, err := ParseRules([]byte("- id: r.two\n  level: HIGH\n  when: size > 0\n"), "2")
	if err != nil {
		t.Fatal(err)
	}
	a := NewAssessor(nil, nil)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				got, err := a.Assess("echo hi", "bash")
				if err != nil {
					t.Error(err)
					return
				}
				checkInvariants(t, "echo hi", got)
			}
		}()
	}
	for i := 0; i < 200; i++ {
		if i%2 == 0 {
			a.SetRules(rs1)
		} else {
			a.SetRules(rs2)
		}
	}
	a.SetRules(nil)
	wg.Wait()
}

func TestAssessorUnknownLanguage(t *testing.T) {
	a := NewAssessor(nil, nil)
	if _, err := a.Assess("x", "cobol"); !errors.Is(err, ErrUnknownLanguage) {
		t.Fatalf("err %v", err)
	}
}
