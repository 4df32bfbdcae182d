package risk

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// assessCase is one entry of testdata/<language>.yaml.
type assessCase struct {
	Name       string   `yaml:"name"`
	Code       string   `yaml:"code"`
	Level      Level    `yaml:"level"`
	Patterns   []string `yaml:"patterns"`
	ProvenSafe bool     `yaml:"proven_safe"`
	Bypass     bool     `yaml:"bypass"`
}

var caseFiles = map[string]string{"python": "python.yaml", "bash": "bash.yaml", "javascript": "javascript.yaml"}

func loadCases(tb testing.TB, lang string) []assessCase {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", caseFiles[lang]))
	if err != nil {
		tb.Fatal(err)
	}
	var cases []assessCase
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&cases); err != nil {
		tb.Fatalf("%s: %v", caseFiles[lang], err)
	}
	return cases
}

func TestAssessCases(t *testing.T) {
	for lang := range caseFiles {
		t.Run(lang, func(t *testing.T) {
			cases := loadCases(t, lang)
			if len(cases) < 45 {
				t.Errorf("%d cases, want at least 45", len(cases))
			}
			names := map[string]bool{}
			for _, tc := range cases {
				if names[tc.Name] {
					t.Errorf("duplicate case name %q", tc.Name)
				}
				names[tc.Name] = true
				t.Run(tc.Name, func(t *testing.T) {
					t.Parallel()
					checkCase(t, lang, tc)
				})
			}
		})
	}
}

func checkCase(t *testing.T, lang string, tc assessCase) {
	t.Helper()
	got, err := Assess(tc.Code, lang)
	if err != nil {
		t.Fatal(err)
	}
	if got.Level != tc.Level {
		t.Errorf("level %v, want %v; patterns %v", got.Level, tc.Level, got.Patterns)
	}
	if got.ProvenSafe != tc.ProvenSafe {
		t.Errorf("proven_safe %v, want %v", got.ProvenSafe, tc.ProvenSafe)
	}
	if tc.Level == SAFE && len(got.Patterns) != 0 {
		t.Errorf("SAFE case has patterns %v", got.Patterns)
	}
	if tc.Bypass && got.Level < MEDIUM {
		t.Errorf("bypass case at %v, want MEDIUM or above", got.Level)
	}
	for _, id := range tc.Patterns {
		if !slices.ContainsFunc(got.Patterns, func(p Pattern) bool { return p.ID == id }) {
			t.Errorf("pattern %s missing; got %v", id, got.Patterns)
		}
	}
	checkInvariants(t, tc.Code, got)
}

// checkInvariants holds for every Assessment (also used by the fuzzers).
func checkInvariants(t testing.TB, code string, a Assessment) {
	t.Helper()
	if a.Level < SAFE || a.Level > CRITICAL {
		t.Fatalf("level %d out of range", a.Level)
	}
	if a.Patterns == nil {
		t.Fatal("nil Patterns")
	}
	if a.ProvenSafe != (a.Level == SAFE) {
		t.Fatalf("proven_safe %v with level %v", a.ProvenSafe, a.Level)
	}
	if a.ProvenSafe && len(a.Patterns) > 0 {
		t.Fatalf("proven safe with patterns %v", a.Patterns)
	}
	lines := countLines(code)
	max := LOW
	for i, p := range a.Patterns {
		if p.Line < 0 || p.Line > lines {
			t.Fatalf("pattern %s line %d outside 0..%d", p.ID, p.Line, lines)
		}
		if _, ok := catalog[p.ID]; !ok && p.Line != 0 { // line 0 without a catalog entry: admin rule
			t.Fatalf("pattern %s not in catalog", p.ID)
		}
		if i > 0 && (a.Patterns[i-1].Line > p.Line || a.Patterns[i-1].Line == p.Line && a.Patterns[i-1].ID > p.ID) {
			t.Fatalf("patterns not sorted: %v", a.Patterns)
		}
		max = maxLevel(max, p.Level)
	}
	if !a.ProvenSafe && a.Level != max {
		t.Fatalf("level %v, max pattern level %v", a.Level, max)
	}
}

func TestUnknownLanguage(t *testing.T) {
	for _, lang := range []string{"", "Python", "py", "sh", "js", "node", "ruby", strings.Repeat("x", 100)} {
		a, err := Assess("print(1)", lang)
		if !errors.Is(err, ErrUnknownLanguage) {
			t.Errorf("%q: err %v, want ErrUnknownLanguage", lang, err)
		}
		if a.Level != CRITICAL || a.Patterns == nil {
			t.Errorf("%q: failed assessment %+v, want CRITICAL with empty patterns", lang, a)
		}
	}
}

func TestOversize(t *testing.T) {
	code := strings.Repeat("print(1)\n", MaxAnalyzedSize/9+1)
	for lang := range caseFiles {
		a, err := Assess(code, lang)
		if err != nil {
			t.Fatal(err)
		}
		if a.Level != CRITICAL || len(a.Patterns) != 1 || a.Patterns[0].ID != "obfuscation.oversize" {
			t.Errorf("%s: %+v", lang, a)
		}
	}
}

func TestLargeInputHandled(t *testing.T) {
	body := strings.Repeat("x = 1\n", 256<<10/6)
	a, err := Assess(body, "python")
	if err != nil || a.Level != SAFE {
		t.Fatalf("256 KiB of assignments: %v %v", a.Level, err)
	}
}

func TestPatternCaps(t *testing.T) {
	code := strings.Repeat("import subprocess\n", 5000)
	a, _ := Assess(code, "python")
	if len(a.Patterns) > maxHits {
		t.Fatalf("%d patterns, cap %d", len(a.Patterns), maxHits)
	}
	n := 0
	for _, p := range a.Patterns {
		if p.ID == "python.process.subprocess" {
			n++
		}
	}
	if n == 0 || n > maxHitsPerID {
		t.Fatalf("%d hits for one id, want 1..%d", n, maxHitsPerID)
	}
}

func TestAssessmentJSON(t *testing.T) {
	a, _ := Assess("import socket", "python")
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"level":"HIGH"`) || !strings.Contains(string(b), `"proven_safe":false`) {
		t.Fatalf("json %s", b)
	}
	var back Assessment
	if err := json.Unmarshal(b, &back); err != nil || back.Level != HIGH {
		t.Fatalf("round trip: %v %v", back, err)
	}
	safe, _ := Assess("print(1)", "python")
	b, _ = json.Marshal(safe)
	if !strings.Contains(string(b), `"patterns":[]`) {
		t.Fatalf("empty patterns must be [], got %s", b)
	}
}

// TestCatalog checks id format and that each language has at least 15 ids.
func TestCatalog(t *testing.T) {
	perLang := map[string]int{}
	for id, d := range catalog {
		parts := strings.Split(id, ".")
		switch {
		case parts[0] == "obfuscation" && len(parts) == 2:
		case len(parts) == 3 && (parts[0] == "python" || parts[0] == "bash" || parts[0] == "js"):
			perLang[parts[0]]++
		default:
			t.Errorf("bad id format %q", id)
		}
		if d.level < LOW || d.level > CRITICAL || d.msg == "" {
			t.Errorf("%s: bad def %+v", id, d)
		}
	}
	for _, l := range []string{"python", "bash", "js"} {
		if perLang[l] < 15 {
			t.Errorf("%s has %d ids, want >= 15", l, perLang[l])
		}
	}
}
