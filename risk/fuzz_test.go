package risk

import (
	"testing"
)

var fuzzLangs = []string{"python", "bash", "javascript", "cobol"}

// FuzzAssess checks that no input panics and that every Assessment keeps
// its invariants. Seeds: every YAML case plus testdata/fuzz/FuzzAssess.
func FuzzAssess(f *testing.F) {
	for i, lang := range fuzzLangs[:3] {
		for _, tc := range loadCases(f, lang) {
			f.Add(tc.Code, uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, code string, li uint8) {
		lang := fuzzLangs[int(li)%len(fuzzLangs)]
		a, err := Assess(code, lang)
		if lang == "cobol" {
			if err == nil {
				t.Fatal("unknown language accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if hasPattern(a, "obfuscation.analysis_failed") {
			t.Fatal("the analyser panicked")
		}
		checkInvariants(t, code, a)
	})
}

// checkTokens holds for every tokenizer: tokens are in source order,
// inside the input, and on a line that exists.
func checkTokens(t *testing.T, src string, toks []token) {
	t.Helper()
	lines := int32(countLines(src))
	if lines == 0 {
		lines = 1
	}
	for i := range toks {
		tk := &toks[i]
		if tk.pos < 0 || int(tk.pos) > len(src) {
			t.Fatalf("token %d %q at %d outside input of %d bytes", i, tk.text, tk.pos, len(src))
		}
		if tk.line < 1 || tk.line > lines {
			t.Fatalf("token %d %q on line %d of %d", i, tk.text, tk.line, lines)
		}
		if tk.kind < tkIdent || tk.kind > tkOther {
			t.Fatalf("token %d kind %d", i, tk.kind)
		}
	}
}

func seedTokenizer(f *testing.F, lang string) {
	for _, tc := range loadCases(f, lang) {
		f.Add(tc.Code)
	}
}

func FuzzPythonTokenizer(f *testing.F) {
	seedTokenizer(f, "python")
	f.Fuzz(func(t *testing.T, src string) {
		toks, _ := lexPython(src, nil)
		checkTokens(t, src, toks)
	})
}

func FuzzBashTokenizer(f *testing.F) {
	seedTokenizer(f, "bash")
	f.Fuzz(func(t *testing.T, src string) {
		lx := lexBash(src, 0, 1, nil)
		checkTokens(t, src, lx.toks)
		for _, s := range lx.subs {
			if s.lo < 0 || s.hi > len(src) || s.lo > s.hi {
				t.Fatalf("substitution %+v outside input of %d bytes", s, len(src))
			}
		}
	})
}

func FuzzJSTokenizer(f *testing.F) {
	seedTokenizer(f, "javascript")
	f.Fuzz(func(t *testing.T, src string) {
		toks, _ := lexJS(src, nil)
		checkTokens(t, src, toks)
	})
}
