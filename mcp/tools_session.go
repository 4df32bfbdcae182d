package mcp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/errcode"
)

type sessionInfoInput struct {
	SessionID string `json:"session_id,omitempty"`
}

// sessionInfoOutput says which session the calls work in and what it
// holds. A session that does not exist yet (nothing ran and no file was
// written) is exists=false; so is one this token may not see, which is
// indistinguishable from it by design.
type sessionInfoOutput struct {
	SessionID      string         `json:"session_id"`
	Default        bool           `json:"default" jsonschema:"this is the MCP session's own session"`
	Exists         bool           `json:"exists"`
	Workspace      string         `json:"workspace" jsonschema:"where files live, as code sees them"`
	Mode           string         `json:"mode" jsonschema:"the gateway's security mode, STRICT or PERMISSIVE"`
	CreatedAt      string         `json:"created_at,omitempty"`
	LastActiveAt   string         `json:"last_active_at,omitempty"`
	Runs           int            `json:"runs"`
	Running        int            `json:"running"`
	LastExecutor   string         `json:"last_executor,omitempty"`
	Resources      map[string]any `json:"resources,omitempty" jsonschema:"live per-session state: the browser's backend, the pool instance"`
	BrowserEnabled bool           `json:"browser_enabled"`
	RequestID      string         `json:"request_id"`
}

func (s *Server) addSessionTool() {
	addTool(s, &sdk.Tool{Name: "session_info", Title: "Session information",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
		Description: "Describe the sandgate session the tools work in: its id, whether it exists yet, its activity " +
			"and live resources, and the gateway's security mode."}, nil, s.sessionInfo)
}

func (s *Server) sessionInfo(ctx context.Context, c *call, in sessionInfoInput) (sessionInfoOutput, reply, error) {
	// Not c.session: describing the session does not make it used.
	own := c.ownSession()
	id := in.SessionID
	if id == "" {
		id = own
	}
	out := sessionInfoOutput{SessionID: id, Default: id == own, Workspace: "/workspace", Mode: s.deps.Manager.Mode(),
		BrowserEnabled: s.deps.Browser != nil, RequestID: c.requestID}
	info, err := s.deps.Manager.Session(ctx, c.principal, id)
	switch code, _, _ := errcode.Of(err); {
	case err == nil:
		out.Exists = true
		out.CreatedAt = rfc3339(info.CreatedAt)
		out.LastActiveAt = rfc3339(info.LastActiveAt)
		out.Runs, out.Running, out.LastExecutor, out.Resources = info.Runs, info.Running, info.LastExecutor, info.Resources
	case code == errcode.NotFound:
	default:
		return sessionInfoOutput{}, reply{}, err
	}
	return out, reply{text: renderSession(out)}, nil
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func renderSession(o sessionInfoOutput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "session %s (mode %s); files under %s\n", o.SessionID, o.Mode, o.Workspace)
	if !o.Exists {
		b.WriteString("nothing has run in it yet and it holds no files")
		return b.String()
	}
	fmt.Fprintf(&b, "created %s; %d runs, %d running", o.CreatedAt, o.Runs, o.Running)
	if o.LastExecutor != "" {
		fmt.Fprintf(&b, "; last executor %s", o.LastExecutor)
	}
	for _, name := range slices.Sorted(maps.Keys(o.Resources)) {
		fmt.Fprintf(&b, "\nlive %s", name)
	}
	return b.String()
}

// addTools registers every tool, in the order tools/list shows them.
func (s *Server) addTools() {
	s.addRunTools()
	s.addFileTools()
	s.addBrowserTool()
	s.addSessionTool()
}
