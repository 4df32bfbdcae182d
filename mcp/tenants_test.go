package mcp

import (
	"strings"
	"testing"
)

// TestOtherTenantIsNotFound: a tool call that names another tenant's
// session (by its qualified id, or its bare name, which resolves in the
// caller's own tenant) is not_found or reaches only the caller's
// namespace, for every session-scoped tool; the other tenant's file is
// untouched.
func TestOtherTenantIsNotFound(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, b := e.connect(agentTok, nil), e.connect(otherTok, nil)
	var wa runOutput
	var written map[string]any
	structured(t, callTool(t, a, "write_file", map[string]any{"path": "secret.txt", "content": "a-secret", "session_id": "a-private"}), &written)
	structured(t, callTool(t, a, "run_code", map[string]any{"code": "print(open('secret.txt').read())", "session_id": "a-private"}), &wa)
	if wa.Stdout != "a-secret\n" {
		t.Fatalf("A's own run: %+v", wa)
	}
	qualified := testPrincipals[agentTok].Tenant + "~a-private"
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"run_code", map[string]any{"code": "print(open('secret.txt').read())"}},
		{"execute", map[string]any{"command": "cat secret.txt"}},
		{"read_file", map[string]any{"path": "secret.txt"}},
		{"write_file", map[string]any{"path": "secret.txt", "content": "pwned"}},
		{"edit_file", map[string]any{"path": "secret.txt", "old": "a-secret", "new": "pwned"}},
		{"ls", map[string]any{"path": ""}},
		{"glob", map[string]any{"pattern": "*"}},
		{"grep", map[string]any{"pattern": "secret"}},
		{"delete_file", map[string]any{"path": "secret.txt"}},
		{"session_info", map[string]any{}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			args := map[string]any{"session_id": qualified}
			for k, v := range tc.args {
				args[k] = v
			}
			res := callTool(t, b, tc.tool, args)
			if tc.tool == "session_info" {
				var info sessionInfoOutput
				structured(t, res, &info)
				if info.Exists {
					t.Errorf("session_info of another tenant's session says it exists: %+v", info)
				}
				return
			}
			if body := errorOf(t, res); body.Code != "not_found" {
				t.Errorf("%s: %+v, want not_found", tc.tool, body)
			}
			if strings.Contains(text(res), "a-secret") {
				t.Errorf("%s leaked A's file: %q", tc.tool, text(res))
			}
		})
	}
	structured(t, callTool(t, a, "run_code", map[string]any{"code": "print(open('secret.txt').read())", "session_id": "a-private"}), &wa)
	if wa.Stdout != "a-secret\n" {
		t.Errorf("A's file after B's calls: %+v", wa)
	}
}
