package mcp

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

var wantTools = []string{"run_code", "execute", "read_file", "write_file", "edit_file", "ls", "glob", "grep",
	"delete_file", "browser", "session_info"}

// TestToolsListed: every tool of the issue is listed, with an object input
// schema that refuses unknown arguments and an output schema.
func TestToolsListed(t *testing.T) {
	e := newEnv(t, envOpts{})
	cs := e.connect(agentTok, nil)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		in := schemaOf(t, tool.InputSchema)
		if in.Type != "object" || in.AdditionalProperties == nil || in.AdditionalProperties.Not == nil {
			t.Errorf("%s: input schema does not refuse unknown arguments: %+v", tool.Name, in)
		}
		if _, ok := in.Properties["session_id"]; !ok {
			t.Errorf("%s: no session_id argument", tool.Name)
		}
		if out := schemaOf(t, tool.OutputSchema); out.Type != "object" || len(out.Properties) == 0 {
			t.Errorf("%s: output schema %+v", tool.Name, out)
		}
		if tool.Description == "" {
			t.Errorf("%s: no description", tool.Name)
		}
	}
	slices.Sort(names)
	want := slices.Clone(wantTools)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	run := toolByName(t, res.Tools, "run_code")
	if lang := schemaOf(t, run.InputSchema).Properties["language"]; len(lang.Enum) != 3 {
		t.Errorf("run_code language enum %v", lang.Enum)
	}
	if req := schemaOf(t, run.InputSchema).Required; !slices.Equal(req, []string{"code"}) {
		t.Errorf("run_code required %v, want [code]", req)
	}
}

func toolByName(t *testing.T, tools []*sdk.Tool, name string) *sdk.Tool {
	t.Helper()
	for _, tool := range tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

func schemaOf(t *testing.T, v any) *jsonschema.Schema {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("schema %s: %v", b, err)
	}
	return &s
}

// checkOutput validates a success result's structuredContent against the
// tool's declared output schema, as strict clients do.
func checkOutput(t *testing.T, cs *sdk.ClientSession, name string, res *sdk.CallToolResult) {
	t.Helper()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := schemaOf(t, toolByName(t, tools.Tools, name).OutputSchema).Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if err := rs.Validate(v); err != nil {
		t.Errorf("%s: structuredContent does not match the output schema: %v\n%s", name, err, b)
	}
}

// TestRunCodeSafe: a SAFE program runs, its output comes back structured
// and as text, and the pipeline wrote one audit record for the derived
// session, naming the principal.
func TestRunCodeSafe(t *testing.T) {
	e := newEnv(t, envOpts{})
	cs := e.connect(agentTok, nil)
	res := callTool(t, cs, "run_code", map[string]any{"code": "print('hello from mcp')"})
	var out runOutput
	structured(t, res, &out)
	checkOutput(t, cs, "run_code", res)
	if out.Stdout != "hello from mcp\n" || out.ExitCode != 0 || !out.Success || out.SandboxType != "subprocess" ||
		out.Decision.Action != "allow" || out.Risk.Level != "SAFE" || out.Approval != nil {
		t.Fatalf("output %+v", out)
	}
	if !strings.HasPrefix(out.SessionID, "mcp-") || len(out.SessionID) != len("mcp-")+32 {
		t.Fatalf("session %q, want the derived mcp-<32 hex>", out.SessionID)
	}
	if txt := text(res); !strings.Contains(txt, "exit code 0") || !strings.Contains(txt, "hello from mcp") {
		t.Errorf("text %q", txt)
	}
	recs := e.records(out.SessionID)
	if len(recs) != 1 || recs[0].Kind != "run_code" || recs[0].RequestID != out.RequestID ||
		recs[0].Principal != "agent:agent-a" || recs[0].Outcome != "ok" {
		t.Fatalf("audit %+v", recs)
	}
}

// TestExecuteAndErrors: execute renders deepagents' combined output; a
// program that fails is a result, not an error; refusals are isError
// results whose text starts with the stable code and whose _meta holds the
// error body.
func TestExecuteAndErrors(t *testing.T) {
	e := newEnv(t, envOpts{})
	cs := e.connect(agentTok, nil)
	res := callTool(t, cs, "execute", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	var out runOutput
	structured(t, res, &out)
	if out.ExitCode != 3 || out.Success || res.IsError {
		t.Fatalf("output %+v", out)
	}
	if txt := text(res); !strings.HasPrefix(txt, "out\n[stderr] err\nexit code 3") {
		t.Errorf("execute text %q", txt)
	}
	cases := []struct {
		name, tool string
		args       map[string]any
		code       string
		field      string
	}{
		{"critical denied in STRICT", "execute", map[string]any{"command": criticalBash}, "policy_denied", ""},
		{"unknown argument", "run_code", map[string]any{"code": "print(1)", "lang": "python"}, "invalid_request", "lang"},
		{"missing argument", "run_code", map[string]any{}, "invalid_request", "code"},
		{"bad enum", "run_code", map[string]any{"code": "print(1)", "language": "cobol"}, "invalid_request", "language"},
		{"wrong type", "execute", map[string]any{"command": 42}, "invalid_request", "command"},
		{"path traversal", "read_file", map[string]any{"path": "../../etc/passwd"}, "path_traversal", ""},
		{"bad session id", "run_code", map[string]any{"code": "print(1)", "session_id": "../x"}, "invalid_request", "session_id"},
		{"missing file", "read_file", map[string]any{"path": "nope.txt"}, "not_found", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := callTool(t, cs, c.tool, c.args)
			body := errorOf(t, res)
			if string(body.Code) != c.code || !strings.HasPrefix(text(res), c.code+": ") || !strings.HasPrefix(body.RequestID, "req_") {
				t.Fatalf("code %q, text %q, want %s", body.Code, text(res), c.code)
			}
			if res.StructuredContent != nil {
				t.Errorf("error result with structuredContent %v", res.StructuredContent)
			}
			if c.field != "" && (len(body.Fields) == 0 || body.Fields[0].Field != c.field) {
				t.Errorf("fields %+v, want %s first", body.Fields, c.field)
			}
			shown, _, _ := strings.Cut(text(res), "request_id:")
			if strings.Contains(shown, "cobol") || strings.Contains(shown, "42") {
				t.Errorf("the refusal echoes the rejected value: %q", text(res))
			}
		})
	}
	denied := errorOf(t, callTool(t, cs, "execute", map[string]any{"command": criticalBash}))
	if denied.Decision == nil || denied.Decision.Action != "deny" || len(denied.Reasons) == 0 || denied.Reasons[0].Code != "risk.critical" {
		t.Errorf("policy denial body %+v", denied)
	}
}

// TestFilesThenRun: a file written with write_file is what code run in the
// same session reads; the other file tools see it too.
func TestFilesThenRun(t *testing.T) {
	e := newEnv(t, envOpts{})
	cs := e.connect(agentTok, nil)
	var w writeFileOutput
	structured(t, callTool(t, cs, "write_file", map[string]any{"path": "/workspace/notes/a.txt", "content": "alpha\nbeta\n"}), &w)
	if w.Path != "/workspace/notes/a.txt" || w.Size != 11 || !w.Created {
		t.Fatalf("write %+v", w)
	}
	var run runOutput
	structured(t, callTool(t, cs, "run_code", map[string]any{"code": "print(open('/workspace/notes/a.txt').read().upper(), end='')"}), &run)
	if run.Stdout != "ALPHA\nBETA\n" {
		t.Fatalf("run read %q (exit %d, stderr %q)", run.Stdout, run.ExitCode, run.Stderr)
	}
	var ed editFileOutput
	structured(t, callTool(t, cs, "edit_file", map[string]any{"path": "notes/a.txt", "old": "beta", "new": "gamma"}), &ed)
	var rd readFileOutput
	res := callTool(t, cs, "read_file", map[string]any{"path": "notes/a.txt"})
	structured(t, res, &rd)
	checkOutput(t, cs, "read_file", res)
	if ed.Occurrences != 1 || rd.Content != "     1\talpha\n     2\tgamma" || rd.TotalLines != 2 {
		t.Fatalf("edit %+v read %+v", ed, rd)
	}
	var ls listOutput
	res = callTool(t, cs, "ls", map[string]any{"path": "notes"})
	structured(t, res, &ls)
	checkOutput(t, cs, "ls", res)
	if len(ls.Entries) != 1 || ls.Entries[0].Path != "/workspace/notes/a.txt" || ls.Entries[0].Type != "file" {
		t.Fatalf("ls %+v", ls)
	}
	var gl listOutput
	structured(t, callTool(t, cs, "glob", map[string]any{"pattern": "**/*.txt"}), &gl)
	var gr grepOutput
	res = callTool(t, cs, "grep", map[string]any{"pattern": "gam"})
	structured(t, res, &gr)
	checkOutput(t, cs, "grep", res)
	if len(gl.Entries) != 1 || len(gr.Matches) != 1 || gr.Matches[0].Line != 2 {
		t.Fatalf("glob %+v grep %+v", gl, gr)
	}
	var del deleteFileOutput
	structured(t, callTool(t, cs, "delete_file", map[string]any{"path": "notes/a.txt"}), &del)
	if code := errorOf(t, callTool(t, cs, "read_file", map[string]any{"path": "notes/a.txt"})).Code; code != "not_found" {
		t.Fatalf("read after delete: %s", code)
	}
	kinds := map[string]int{}
	for _, r := range e.records(run.SessionID) {
		kinds[r.Kind]++
	}
	if kinds["file.write"] != 1 || kinds["run_code"] != 1 || kinds["file.edit"] != 1 || kinds["file.delete"] != 1 {
		t.Errorf("audit kinds %v", kinds)
	}
}
