package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
)

// ErrorMetaKey is the _meta key of an isError result that holds the HTTP
// API's error body.
const ErrorMetaKey = "sandgate/error"

// errorBody is the HTTP API's error body (DESIGN.md §5), plus the decision
// when the pipeline judged the request before refusing it.
type errorBody struct {
	Code      errcode.Code         `json:"code"`
	Message   string               `json:"message"`
	Reasons   []policy.Reason      `json:"reasons,omitempty"`
	Fields    []errcode.FieldError `json:"fields,omitempty"`
	Decision  *decisionView        `json:"decision,omitempty"`
	RequestID string               `json:"request_id"`
	// Rule, AgentGuidance and Proposal are a denial's way to ask for a
	// narrow exception (proposal.go).
	Rule          string        `json:"rule,omitempty"`
	AgentGuidance string        `json:"agent_guidance,omitempty"`
	Proposal      *proposalHint `json:"proposal,omitempty"`
}

// okResult is a successful call: out as structuredContent, the reply's text
// and extra content as content.
func okResult(out any, r reply) (*sdk.CallToolResult, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("mcp: marshal tool output: %w", err)
	}
	content := append([]sdk.Content{&sdk.TextContent{Text: r.text}}, r.extra...)
	return &sdk.CallToolResult{StructuredContent: json.RawMessage(b), Content: content}, nil
}

// errorResult is a refused or failed call: isError, a text that starts
// with the stable code, and the error body under _meta. It carries no
// structuredContent, which would have to match the success schema. The
// mapping is errcode.Of's, as in the HTTP API; internal error text never
// reaches the client (and is logged).
func (s *Server) errorResult(ctx context.Context, c *call, err error) *sdk.CallToolResult {
	code, status, msg := errcode.Of(err)
	body := errorBody{Code: code, Message: msg, RequestID: c.requestID}
	var denied *manager.DeniedError
	if errors.As(err, &denied) {
		body.Reasons = denied.Reasons
		if denied.Decision.Action != "" {
			d := viewDecision(denied.Decision)
			body.Decision = &d
		}
	}
	var bdenied *browser.DeniedError
	if errors.As(err, &bdenied) {
		body.Reasons = bdenied.Reasons
	}
	var invalid *errcode.ValidationError
	if errors.As(err, &invalid) {
		body.Fields = invalid.Fields
	}
	withGuidance(c, &body)
	if status >= 500 {
		s.log.ErrorContext(ctx, "mcp tool call failed", "request_id", c.requestID, "tool", toolName(c), "code", code, "err", err)
	}
	return &sdk.CallToolResult{
		IsError: true,
		Content: []sdk.Content{&sdk.TextContent{Text: renderError(body)}},
		Meta:    sdk.Meta{ErrorMetaKey: body},
	}
}

func toolName(c *call) string {
	if c.req == nil || c.req.Params == nil {
		return ""
	}
	return c.req.Params.Name
}

// renderError is the error as a model reads it: the code first, then why.
func renderError(b errorBody) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %s\n", b.Code, b.Message)
	for _, r := range b.Reasons {
		fmt.Fprintf(&sb, "reason %s: %s\n", r.Code, r.Message)
	}
	for _, f := range b.Fields {
		fmt.Fprintf(&sb, "argument %s %s (%s)\n", f.Field, f.Message, f.Code)
	}
	if b.Proposal != nil {
		// The endpoint (with its session id) stays in _meta: the text
		// never echoes request-derived values.
		fmt.Fprintf(&sb, "to ask for a narrow exception to %s: POST a proposal (kind egress_host or pattern, value, justification) "+
			"to the endpoint in _meta %s .proposal\n", b.Rule, ErrorMetaKey)
	}
	fmt.Fprintf(&sb, "request_id: %s", b.RequestID)
	return sb.String()
}
