package risk

import (
	"os"
	"path/filepath"
	"testing"
)

func benchAssess(b *testing.B, file, lang string) {
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		b.Fatal(err)
	}
	code := string(data)
	b.SetBytes(int64(len(code)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Assess(code, lang); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAssess is the budget benchmark: a realistic 4 KiB Python program
// must assess in at most 60 µs (the policy stage adds about 55 µs and the
// pair must stay under 150 µs p50).
func BenchmarkAssess(b *testing.B)     { benchAssess(b, "bench_4k.py", "python") }
func BenchmarkAssessBash(b *testing.B) { benchAssess(b, "bench_4k.sh", "bash") }
func BenchmarkAssessJS(b *testing.B)   { benchAssess(b, "bench_4k.js", "javascript") }

func BenchmarkAssessorWithExampleRules(b *testing.B) {
	rs, err := LoadRules("rules.example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	a := NewAssessor(rs, nil)
	data, _ := os.ReadFile(filepath.Join("testdata", "bench_4k.py"))
	code := string(data)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Assess(code, "python"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBenchInputs(t *testing.T) {
	for file, lang := range map[string]string{"bench_4k.py": "python", "bench_4k.sh": "bash", "bench_4k.js": "javascript"} {
		data, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		a, err := Assess(string(data), lang)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %v %v", file, a.Level, a.Patterns)
		checkInvariants(t, string(data), a)
	}
}
