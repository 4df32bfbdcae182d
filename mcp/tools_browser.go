package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/errcode"
)

var errBrowserOff = errcode.New(errcode.ExecutorUnavailable, "the browser is not enabled on this gateway")

type browserInput struct {
	Action    string               `json:"action" jsonschema:"the action to run"`
	Params    map[string]any       `json:"params,omitempty" jsonschema:"the action's parameters, as in POST /v1/sessions/{id}/browser: navigate {url}, click {selector}, type {selector, text}, wait_for {selector, state}, content {format, selector}, screenshot {full_page, path}, scroll {x, y or selector}; each may take timeout_s"`
	Context   browser.RouteContext `json:"context,omitempty" jsonschema:"backend selection: needs_file_access or is_research run the AIO sandbox's browser"`
	SessionID string               `json:"session_id,omitempty"`
}

type browserOutput struct {
	Action  string `json:"action"`
	Backend string `json:"backend" jsonschema:"external or aio"`
	Started bool   `json:"started" jsonschema:"this action started the session's browser"`
	Result  any    `json:"result" jsonschema:"the action's own result (url and title, content, the screenshot's path...)"`
	// Blocked lists the requests the policy refused while the action ran.
	Blocked        []browser.Blocked `json:"blocked"`
	BlockedDropped int               `json:"blocked_dropped,omitempty"`
	// Warnings lists the requests let through only because the rules
	// that would have refused them are in warn mode.
	Warnings   []browser.Warning `json:"warnings,omitempty"`
	DurationMS int64             `json:"duration_ms"`
	RequestID  string            `json:"request_id"`
}

func (s *Server) addBrowserTool() {
	addTool(s, &sdk.Tool{
		Name:  "browser",
		Title: "Drive a browser",
		Description: "Run one action in the session's browser (one per session, started on first use). URLs are " +
			"checked by the policy before navigation and for every request the page makes. A screenshot comes " +
			"back as an image and is saved in the workspace.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: new(false), OpenWorldHint: new(true)},
	}, func(in *jsonschema.Schema) { setEnum(in, "action", browser.Actions...) }, s.browse)
}

func (s *Server) browse(ctx context.Context, c *call, in browserInput) (browserOutput, reply, error) {
	// Resolved and admitted as the HTTP handler does: another tenant's
	// session is not_found, a tenant over its quotas is refused.
	ref, release, err := s.deps.Manager.AdmitSession(ctx, c.principal, c.session(in.SessionID), browser.KindAction)
	defer release()
	if err != nil {
		return browserOutput{}, reply{}, err
	}
	if s.deps.Browser == nil {
		return browserOutput{}, reply{}, errBrowserOff
	}
	params := in.Params
	if in.Action == browser.ActionScreenshot {
		// The image goes back as content; the agent need not ask for it.
		params = cloneParams(params)
		params["return_base64"] = true
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return browserOutput{}, reply{}, fieldError("params", "type", "must be a JSON object")
	}
	if params == nil {
		raw = nil
	}
	res, err := s.deps.Browser.Do(ctx, browser.Request{
		RequestID: c.requestID, SessionID: ref.Key, Principal: c.principal.Role + ":" + c.principal.Name,
		Action: in.Action, Params: raw, Context: in.Context,
	})
	if err != nil {
		return browserOutput{}, reply{}, err
	}
	out := browserOutput{Action: res.Action, Backend: res.Backend, Started: res.Started, Result: res.Data,
		Blocked: res.Blocked, BlockedDropped: res.BlockedDropped, Warnings: res.Warnings,
		DurationMS: res.Duration.Milliseconds(), RequestID: c.requestID}
	if out.Blocked == nil {
		out.Blocked = []browser.Blocked{}
	}
	r := reply{text: renderBrowser(out)}
	if shot, ok := res.Data.(browser.ScreenshotResult); ok && shot.Base64 != "" {
		png, err := base64.StdEncoding.DecodeString(shot.Base64)
		if err != nil {
			return browserOutput{}, reply{}, fmt.Errorf("mcp: screenshot: %w", err)
		}
		r.extra = append(r.extra, &sdk.ImageContent{Data: png, MIMEType: "image/png"})
		// The image is content; structuredContent keeps where it was saved.
		shot.Base64 = ""
		out.Result = shot
	}
	return out, r, nil
}

func cloneParams(p map[string]any) map[string]any {
	out := make(map[string]any, len(p)+1)
	for k, v := range p {
		out[k] = v
	}
	return out
}

func renderBrowser(o browserOutput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on the %s browser", o.Action, o.Backend)
	if o.Started {
		b.WriteString(" (started it)")
	}
	switch r := o.Result.(type) {
	case browser.ContentResult:
		b.WriteString("\n")
		b.WriteString(r.Content)
		if r.Truncated {
			b.WriteString("\n(truncated)")
		}
	case browser.ScreenshotResult:
		fmt.Fprintf(&b, ": %dx%d PNG saved at %s", r.Width, r.Height, r.Path)
	default:
		if j, err := json.Marshal(r); err == nil {
			b.WriteString(": ")
			b.Write(j)
		}
	}
	for _, bl := range o.Blocked {
		fmt.Fprintf(&b, "\nblocked %s (%s)", bl.URL, bl.Layer)
	}
	// A warn rule's request went through; the agent is told, as a run's
	// policy warning tells it.
	for _, w := range o.Warnings {
		for _, r := range w.Reasons {
			fmt.Fprintf(&b, "\npolicy warning %s: %s (%s, would be denied)", r.Code, r.Message, w.URL)
		}
	}
	return b.String()
}
