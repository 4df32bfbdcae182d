package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/manager"
)

// call is one tool call as the handlers see it.
type call struct {
	s         *Server
	req       *sdk.CallToolRequest
	principal manager.Principal
	requestID string
	// fwd is set on a call another replica forwarded here (forward.go):
	// its MCP session lives there.
	fwd *forwarded
}

// session is the sandgate session the call works in: the one its
// session_id argument names, else its MCP session's own.
func (c *call) session(arg string) string {
	if arg != "" {
		return arg
	}
	if c.fwd != nil {
		return c.fwd.ownSession
	}
	return c.s.touch(c.req.Session, c.principal)
}

// ownSession is the derived session of the call's MCP session.
func (c *call) ownSession() string {
	if c.fwd != nil {
		return c.fwd.ownSession
	}
	return derivedSessionID(c.req.Session.ID())
}

// reply is a handler's rendering of its output for a model: a text, and
// more content after it (a screenshot).
type reply struct {
	text  string
	extra []sdk.Content
}

// handler is a typed tool: its input decoded and checked against the
// tool's input schema, its output the tool's structuredContent. An error is
// the tool's isError result, with its stable code.
type handler[In, Out any] func(ctx context.Context, c *call, in In) (Out, reply, error)

// Refusals of the plumbing. errClosing is a 503-class code: the call may be
// retried against a gateway that is up. errNoPrincipal cannot happen behind
// api, which authenticates every request; it keeps a handler from running
// without a principal whatever the wiring.
var (
	errClosing     = errcode.New(errcode.ExecutorUnavailable, "the gateway is shutting down")
	errNoPrincipal = errcode.New(errcode.Unauthorized, "a valid bearer token is required")
)

// addTool registers a typed tool. The input schema is inferred from In
// (with tweak applied: enums, defaults) and refuses unknown arguments; the
// output schema from Out.
func addTool[In, Out any](s *Server, t *sdk.Tool, tweak func(*jsonschema.Schema), h handler[In, Out]) {
	in := mustSchema[In]()
	if p := in.Properties["session_id"]; p != nil {
		p.Description = sessionArgDoc
	}
	if tweak != nil {
		tweak(in)
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: tool %s: input schema: %v", t.Name, err))
	}
	t.InputSchema, t.OutputSchema = in, mustSchema[Out]()
	invoke := func(ctx context.Context, c *call, raw json.RawMessage) *sdk.CallToolResult {
		var v In
		if err := decodeArgs(raw, in, resolved, &v); err != nil {
			return s.errorResult(ctx, c, err)
		}
		out, r, err := h(ctx, c, v)
		if err != nil {
			return s.errorResult(ctx, c, err)
		}
		res, err := okResult(out, r)
		if err != nil {
			return s.errorResult(ctx, c, err)
		}
		return res
	}
	s.tools[t.Name] = invoke
	s.sdk.AddTool(t, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		c := &call{s: s, req: req, requestID: newRequestID()}
		if s.isClosed() {
			return s.errorResult(ctx, c, errClosing), nil
		}
		p, ok := principalOf(req.Extra)
		if !ok {
			return s.errorResult(ctx, c, errNoPrincipal), nil
		}
		c.principal = p
		ctx = manager.WithFrontEnd(ctx, "mcp")
		res, ctx, forwarded := s.forwardElsewhere(ctx, c)
		if forwarded {
			return res, nil
		}
		return invoke(ctx, c, req.Params.Arguments), nil
	})
}

func mustSchema[T any]() *jsonschema.Schema {
	sch, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %T: %v", *new(T), err))
	}
	return sch
}

// newRequestID is a tool call's request id, in the HTTP API's format: each
// call is one request in the audit log, and the approval page shows it.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return "req_" + hex.EncodeToString(b[:])
}

var errArguments = errcode.New(errcode.InvalidRequest, "the arguments do not match the tool's input schema")

// decodeArgs checks raw against the input schema and decodes it into v.
// The schema validator's messages quote the values they reject (code,
// secrets), so a refusal is described from the schema instead: unknown,
// missing, mistyped or out-of-enum arguments by name, never by value.
func decodeArgs(raw json.RawMessage, sch *jsonschema.Schema, resolved *jsonschema.Resolved, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = json.RawMessage("{}")
	}
	var instance any
	if err := json.Unmarshal(raw, &instance); err != nil {
		return errArguments
	}
	if err := resolved.Validate(instance); err != nil {
		return &errcode.ValidationError{Kind: errArguments, Fields: describe(instance, sch, v)}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return &errcode.ValidationError{Kind: errArguments, Fields: describe(instance, sch, v)}
	}
	return nil
}

// describe names what is wrong with instance, one field error per argument.
func describe(instance any, sch *jsonschema.Schema, v any) []errcode.FieldError {
	obj, ok := instance.(map[string]any)
	if !ok {
		return []errcode.FieldError{{Field: "arguments", Code: "type", Message: "must be a JSON object"}}
	}
	var out []errcode.FieldError
	for _, k := range sortedKeys(obj) {
		prop, known := sch.Properties[k]
		switch {
		case !known:
			out = append(out, errcode.FieldError{Field: k, Code: "unknown", Message: "is not an argument of this tool"})
		case len(prop.Enum) > 0 && !slices.Contains(prop.Enum, obj[k]):
			out = append(out, errcode.FieldError{Field: k, Code: "oneof", Message: "must be one of: " + enumList(prop.Enum)})
		case !typeMatches(prop, obj[k]):
			out = append(out, errcode.FieldError{Field: k, Code: "type", Message: "must be a JSON " + typeName(prop)})
		}
	}
	for _, k := range sch.Required {
		if _, ok := obj[k]; !ok {
			out = append(out, errcode.FieldError{Field: k, Code: "required", Message: "is required"})
		}
	}
	if len(out) == 0 {
		out = append(out, errcode.FieldError{Field: "arguments", Code: "invalid", Message: "do not match the tool's input schema"})
	}
	return out
}

func typeMatches(prop *jsonschema.Schema, val any) bool {
	types := prop.Types
	if prop.Type != "" {
		types = []string{prop.Type}
	}
	if len(types) == 0 {
		return true
	}
	var got string
	switch x := val.(type) {
	case nil:
		got = "null"
	case bool:
		got = "boolean"
	case string:
		got = "string"
	case float64:
		got = "number"
		if x == float64(int64(x)) && slices.Contains(types, "integer") {
			got = "integer"
		}
	case []any:
		got = "array"
	case map[string]any:
		got = "object"
	}
	return slices.Contains(types, got)
}

func typeName(prop *jsonschema.Schema) string {
	if prop.Type != "" {
		return prop.Type
	}
	return fmt.Sprint(prop.Types)
}

func enumList(vals []any) string {
	b, _ := json.Marshal(vals)
	return string(b)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// setEnum constrains a string property of an input schema to values.
func setEnum(sch *jsonschema.Schema, prop string, values ...string) {
	p := sch.Properties[prop]
	if p == nil {
		panic("mcp: no property " + prop)
	}
	p.Enum = make([]any, len(values))
	for i, v := range values {
		p.Enum[i] = v
	}
}
