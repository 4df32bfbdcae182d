package policy

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"
)

// treeWith returns the default policy tree with extra or replaced files.
func treeWith(t testing.TB, extra map[string]string) fstest.MapFS {
	t.Helper()
	files, err := readTree(DefaultFS(), false)
	if err != nil {
		t.Fatal(err)
	}
	m := fstest.MapFS{}
	for _, f := range files {
		m[f.path] = &fstest.MapFile{Data: f.content}
	}
	for p, src := range extra {
		if src == "" {
			delete(m, p)
			continue
		}
		m[p] = &fstest.MapFile{Data: []byte(src)}
	}
	return m
}

// replaceDecision swaps the default exec.rego for a policy whose decision
// rule is src, keeping the package's schema annotation. The package's
// other files go too (grants.rego, overlay.rego and every test): they read
// exec.rego's rules (level, the mode table, base_executor), which src does
// not define.
func replaceDecision(t testing.TB, src string) fstest.MapFS {
	t.Helper()
	files := map[string]string{
		"sandgate/exec/exec.rego": "# METADATA\n# scope: package\n# schemas:\n#   - input: schema.exec_input\npackage sandgate.exec\n\n" + src,
	}
	others, err := fs.Glob(DefaultFS(), "sandgate/exec/*.rego")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range others {
		if p != "sandgate/exec/exec.rego" {
			files[p] = ""
		}
	}
	return treeWith(t, files)
}

func TestFailClosed(t *testing.T) {
	cases := []struct {
		name    string
		rule    string
		timeout time.Duration
		want    string
	}{
		{"undefined decision", `decision := {"action": "allow"} if input.mode == "never"`, 0, ReasonUndefined},
		{"builtin error", `decision := {"action": "allow", "executor": "subprocess", "reasons": [], "obligations": {"network": false, "timeout_s": to_number(input.mode), "memory_mb": 1}}`, 0, ReasonEvalError},
		{"evaluation timeout", `decision := {"action": "allow", "executor": "subprocess", "reasons": [], "obligations": {"network": false, "timeout_s": count([x | some x in numbers.range(1, 100000000)]), "memory_mb": 1}}`, 20 * time.Millisecond, ReasonTimeout},
		{"unknown action", `decision := {"action": "maybe", "executor": "subprocess", "reasons": [], "obligations": {"network": false, "timeout_s": 1, "memory_mb": 1}}`, 0, ReasonInvalidDecision},
		{"unknown executor", `decision := {"action": "allow", "executor": "host", "reasons": [], "obligations": {"network": false, "timeout_s": 1, "memory_mb": 1}}`, 0, ReasonInvalidDecision},
		{"unexpected field", `decision := {"action": "allow", "executor": "docker", "reasons": [], "obligations": {"network": false, "timeout_s": 1, "memory_mb": 1}, "extra": 1}`, 0, ReasonInvalidDecision},
		{"reason without code", `decision := {"action": "allow", "executor": "docker", "reasons": [{"message": "m"}], "obligations": {"network": false, "timeout_s": 1, "memory_mb": 1}}`, 0, ReasonInvalidDecision},
		{"negative memory", `decision := {"action": "allow", "executor": "docker", "reasons": [], "obligations": {"network": false, "timeout_s": 1, "memory_mb": -5}}`, 0, ReasonInvalidDecision},
		{"fractional timeout", `decision := {"action": "allow", "executor": "docker", "reasons": [], "obligations": {"network": false, "timeout_s": 1.5, "memory_mb": 1}}`, 0, ReasonInvalidDecision},
		{"allow without timeout", `decision := {"action": "allow", "executor": "docker", "reasons": [], "obligations": {"network": false, "timeout_s": 0, "memory_mb": 1}}`, 0, ReasonInvalidDecision},
		{"network not boolean", `decision := {"action": "allow", "executor": "docker", "reasons": [], "obligations": {"network": "no", "timeout_s": 1, "memory_mb": 1}}`, 0, ReasonInvalidDecision},
		{"negative max_procs", `decision := {"action": "allow", "executor": "docker", "reasons": [], "obligations": {"network": false, "timeout_s": 1, "memory_mb": 1, "max_procs": -1}}`, 0, ReasonInvalidDecision},
		{"not an object", `decision := "allow"`, 0, ReasonInvalidDecision},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, Options{FS: replaceDecision(t, c.rule), EvalTimeout: c.timeout})
			d := e.Decide(context.Background(), baseInput("STRICT", "SAFE", true))
			if d.Action != ActionDeny || !d.OnlyReason(c.want) {
				t.Fatalf("got %s %v, want deny with %s", d.Action, d.Reasons, c.want)
			}
			if d.PolicyRevision != e.Revision() {
				t.Fatalf("a fail-closed deny must still name the revision")
			}
		})
	}
}

func TestValidDecisionAccepted(t *testing.T) {
	// The control for TestFailClosed: the same shape with valid values is
	// accepted, so the cases above fail for the reason they name.
	rule := `decision := {"action": "allow", "executor": "docker", "reasons": [{"code": "c", "message": "m"}], "obligations": {"network": false, "timeout_s": 7, "memory_mb": 64}}`
	e := newEngine(t, Options{FS: replaceDecision(t, rule)})
	d := e.Decide(context.Background(), baseInput("STRICT", "SAFE", true))
	if d.Action != ActionAllow || d.Executor != "docker" || d.Obligations.TimeoutS != 7 || d.Obligations.MemoryMB != 64 ||
		d.Obligations.MaxProcs != 0 {
		t.Fatalf("got %+v", d)
	}
	// max_procs is optional; when set it is carried through.
	rule = `decision := {"action": "allow", "executor": "docker", "reasons": [], "obligations": {"network": false, "timeout_s": 7, "memory_mb": 64, "max_procs": 9}}`
	e = newEngine(t, Options{FS: replaceDecision(t, rule)})
	if d := e.Decide(context.Background(), baseInput("STRICT", "SAFE", true)); d.Obligations.MaxProcs != 9 {
		t.Fatalf("max_procs 9 not carried: %+v", d)
	}
}

func TestCancelledContextDenies(t *testing.T) {
	e := newEngine(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := e.Decide(ctx, baseInput("STRICT", "SAFE", true))
	if d.Action != ActionDeny {
		t.Fatalf("a cancelled request must not be allowed: %+v", d)
	}
}

// TestRequestEndStopsEvaluation: a request that ends while its (slow)
// evaluation runs stops the evaluation and is denied, well before the
// evaluation bound; and the bound still applies to a request without a
// deadline of its own.
func TestRequestEndStopsEvaluation(t *testing.T) {
	slow := `decision := {"action": "allow", "executor": "subprocess", "reasons": [], "obligations": {"network": false, "timeout_s": count([x | some x in numbers.range(1, 100000000)]), "memory_mb": 1}}`
	e := newEngine(t, Options{FS: replaceDecision(t, slow), EvalTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	d := e.Decide(ctx, baseInput("STRICT", "SAFE", true))
	if d.Action != ActionDeny || !d.OnlyReason(ReasonTimeout) {
		t.Fatalf("request deadline mid-evaluation: %s %v, want deny %s", d.Action, d.Reasons, ReasonTimeout)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	d = e.Decide(ctx, baseInput("STRICT", "SAFE", true))
	if d.Action != ActionDeny || !d.OnlyReason(ReasonEvalError) {
		t.Fatalf("request cancelled mid-evaluation: %s %v, want deny %s", d.Action, d.Reasons, ReasonEvalError)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the two evaluations took %v: the request's end did not stop them", took)
	}
}

func TestRejectedAtLoad(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
	}{
		{"syntax error", map[string]string{"sandgate/exec/broken.rego": "package sandgate.exec\n\ndeny_reasons contains x if {"}},
		{"schema typo", map[string]string{"sandgate/exec/typo.rego": "package sandgate.exec\n\ndeny_reasons contains reason(\"x\", \"y\") if input.request.langauge == \"bash\"\n"}},
		{"network builtin", map[string]string{"sandgate/exec/net.rego": "package sandgate.exec\n\ndeny_reasons contains reason(\"x\", \"y\") if http.send({\"method\": \"get\", \"url\": \"http://127.0.0.1:1\"}).status_code == 200\n"}},
		{"runtime builtin", map[string]string{"sandgate/exec/rt.rego": "package sandgate.exec\n\ndeny_reasons contains reason(\"x\", \"y\") if opa.runtime().env.HOME\n"}},
		{"strict unused var", map[string]string{"sandgate/exec/strict.rego": "package sandgate.exec\n\ndeny_reasons contains reason(\"x\", \"y\") if {\n\tunused := 1\n\tinput.mode == \"Z\"\n}\n"}},
		{"decision rule removed", map[string]string{"sandgate/exec/exec.rego": ""}},
		{"bad data json", map[string]string{"sandgate/config/data.json": "{not json"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(context.Background(), Options{FS: treeWith(t, c.files)})
			if err == nil {
				t.Fatal("policy loaded, want it rejected")
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("err %v does not wrap ErrInvalidPolicy", err)
			}
			t.Log(err)
		})
	}
}
