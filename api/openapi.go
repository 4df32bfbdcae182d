package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/risk"
)

// The OpenAPI 3.1 contract, GET /v1/openapi.json (issue 20). It is built
// from the operation table (openapi_ops.go) and the Go types the handlers
// encode and decode: each body schema is inferred from its type with
// jsonschema-go, so a field added to a response is in the document the
// moment it is in the code. openapi_test.go holds the table against the
// routes the server registers and against real responses, so neither can
// drift from the other. The document is public, as the shape of an API is
// no secret; it names no token, tenant or session.

// Media types of the document.
const (
	mediaJSON   = "application/json"
	mediaBinary = "application/octet-stream"
)

// authKind is how an operation authenticates.
type authKind int

const (
	authBearer      authKind = iota // Authorization: Bearer, the roles listed
	authNone                        // probes, the page, the document itself
	authProvisioner                 // X-API-Key or bearer: an agent token
	authCapability                  // the sandbox URL's capability
	authSocket                      // bearer, or the approval page's ticket
)

// errShape is the body of an operation's error answers.
type errShape int

const (
	errStandard errShape = iota // {"error": {...}}
	errDeerFlow                 // {"detail", "error"}
	errAIO                      // the AIO envelope with "error"
)

// schemaRef is a named body schema: name is its components.schemas key,
// and v a value of the Go type it is inferred from (nil: any JSON). A
// front end's schema (fe) takes its value from the mounted front end's
// Schemas, by name.
type schemaRef struct {
	name string
	v    any
	fe   bool
}

func sch(name string, v any) *schemaRef { return &schemaRef{name: name, v: v} }

// fsch is a mounted front end's wire shape (DeerFlowServer.Schemas).
func fsch(name string) *schemaRef { return &schemaRef{name: name, fe: true} }

// param is a query parameter.
type param struct {
	name, typ, desc string
	required        bool
}

// op is one operation of the document.
type op struct {
	method, path string
	id, summary  string
	tag          string
	auth         authKind
	roles        []Role
	query        []param
	body         *schemaRef // JSON request body
	rawBody      bool       // a raw octet-stream request body instead
	formBody     bool       // an application/x-www-form-urlencoded body instead
	ok           int        // the success status
	okBody       *schemaRef // JSON success body; nil with okMedia unset: none
	okMedia      string     // a non-JSON success body's media type
	stream       bool       // also answers application/x-ndjson (streamEvent)
	okLines      *schemaRef // an application/x-ndjson success body: one of this per line
	orFileError  bool       // the 200 may also be an AIO file failure
	alt          []altResp  // other documented non-error answers
	errs         []int      // error statuses
	errBody      errShape
	// frontEnd: a mounted front end's operation (fsch bodies), in the
	// document only when that front end is mounted.
	frontEnd bool
}

// altResp is a documented answer besides the success and the errors.
type altResp struct {
	status int
	body   *schemaRef
	desc   string
}

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// openAPICache is the server's document, built once: it describes the
// routes this server mounts, the front ends' among them.
type openAPICache struct {
	once sync.Once
	doc  []byte
	err  error
}

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) error {
	s.openAPIDoc.once.Do(func() {
		var fe map[string]any
		if s.deps.DeerFlow != nil {
			fe = s.deps.DeerFlow.Schemas()
		}
		s.openAPIDoc.doc, s.openAPIDoc.err = buildOpenAPI(fe)
	})
	doc, err := s.openAPIDoc.doc, s.openAPIDoc.err
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", mediaJSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(doc)
	return nil
}

// buildOpenAPI renders the document, with the operations of the front end
// whose wire shapes fe holds (none when nil).
func buildOpenAPI(fe map[string]any) ([]byte, error) {
	d, err := openAPIDocument(fe)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(d, "", "  ")
}

// openAPIDoc is the document as a value (the tests read its schemas).
type openAPIDoc struct {
	OpenAPI    string                    `json:"openapi"`
	Info       map[string]any            `json:"info"`
	Paths      map[string]map[string]any `json:"paths"`
	Components openAPIComponents         `json:"components"`
	Tags       []map[string]string       `json:"tags"`
	Security   []map[string][]string     `json:"security"`
}

type openAPIComponents struct {
	Schemas         map[string]*jsonschema.Schema `json:"schemas"`
	SecuritySchemes map[string]any                `json:"securitySchemes"`
}

func openAPIDocument(fe map[string]any) (*openAPIDoc, error) {
	b := &docBuilder{schemas: map[string]*jsonschema.Schema{}, fe: fe}
	d := &openAPIDoc{
		OpenAPI: "3.1.0",
		Info: map[string]any{
			"title":   "sandgate",
			"version": "v1",
			"description": "Security-policy execution gateway (DESIGN.md §5). Every error answer has the body " +
				"components.schemas.Error with a stable code; a streamed run (Accept: application/x-ndjson) is one " +
				"StreamEvent per line.",
		},
		Paths: map[string]map[string]any{},
		Components: openAPIComponents{Schemas: b.schemas, SecuritySchemes: map[string]any{
			"bearer":      map[string]any{"type": "http", "scheme": "bearer", "description": "an agent, approver or admin token, or a JWT"},
			"provisioner": map[string]any{"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "an agent token (DeerFlow's provisioner_api_key)"},
		}},
		Security: []map[string][]string{{"bearer": {}}},
	}
	tags := map[string]bool{}
	for _, o := range operations() {
		if o.frontEnd && fe == nil {
			continue
		}
		item, err := b.operation(o)
		if err != nil {
			return nil, fmt.Errorf("openapi %s %s: %w", o.method, o.path, err)
		}
		if d.Paths[o.path] == nil {
			d.Paths[o.path] = map[string]any{}
		}
		d.Paths[o.path][strings.ToLower(o.method)] = item
		tags[o.tag] = true
	}
	for _, t := range slices.Sorted(func(yield func(string) bool) {
		for t := range tags {
			if !yield(t) {
				return
			}
		}
	}) {
		d.Tags = append(d.Tags, map[string]string{"name": t})
	}
	return d, b.err
}

// docBuilder infers and names the schemas.
type docBuilder struct {
	schemas map[string]*jsonschema.Schema
	fe      map[string]any // the front end's wire shapes, for fsch
	err     error
}

// ref adds r's schema to the components (once) and returns a reference.
func (b *docBuilder) ref(r *schemaRef) map[string]any {
	if _, ok := b.schemas[r.name]; !ok {
		v := r.v
		if r.fe {
			var ok bool
			if v, ok = b.fe[r.name]; !ok && b.err == nil {
				b.err = fmt.Errorf("schema %s: the front end has none", r.name)
			}
		}
		s, err := inferSchema(v)
		if err != nil && b.err == nil {
			b.err = fmt.Errorf("schema %s: %w", r.name, err)
		}
		b.schemas[r.name] = s
	}
	return map[string]any{"$ref": "#/components/schemas/" + r.name}
}

// typeSchemas are the types whose JSON is not what their Go kind says.
var typeSchemas = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[json.RawMessage](): {},
	reflect.TypeFor[[]byte]():          {Type: "string", ContentEncoding: "base64"},
	reflect.TypeFor[risk.Level]():      riskLevelSchema(),
}

// riskLevelSchema is a risk.Level as it marshals: its name.
func riskLevelSchema() *jsonschema.Schema {
	s := &jsonschema.Schema{Type: "string"}
	for l := risk.SAFE; l <= risk.CRITICAL; l++ {
		s.Enum = append(s.Enum, l.String())
	}
	return s
}

func inferSchema(v any) (*jsonschema.Schema, error) {
	if v == nil {
		return &jsonschema.Schema{}, nil
	}
	s, err := jsonschema.ForType(reflect.TypeOf(v), &jsonschema.ForOptions{TypeSchemas: typeSchemas})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (b *docBuilder) operation(o op) (map[string]any, error) {
	item := map[string]any{"operationId": o.id, "summary": o.summary, "tags": []string{o.tag}}
	switch o.auth {
	case authNone, authCapability:
		item["security"] = []any{}
	case authProvisioner:
		item["security"] = []map[string][]string{{"provisioner": {}}, {"bearer": {}}}
	}
	if len(o.roles) > 0 {
		roles := make([]string, len(o.roles))
		for i, r := range o.roles {
			roles[i] = string(r)
		}
		item["x-roles"] = roles
	}
	var params []map[string]any
	for _, m := range pathParam.FindAllStringSubmatch(o.path, -1) {
		params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]string{"type": "string"}})
	}
	for _, q := range o.query {
		params = append(params, map[string]any{"name": q.name, "in": "query", "required": q.required,
			"description": q.desc, "schema": map[string]string{"type": q.typ}})
	}
	if params != nil {
		item["parameters"] = params
	}
	switch {
	case o.body != nil:
		item["requestBody"] = map[string]any{"required": true, "content": map[string]any{mediaJSON: map[string]any{"schema": b.ref(o.body)}}}
	case o.rawBody:
		item["requestBody"] = map[string]any{"required": true, "content": map[string]any{mediaBinary: map[string]any{"schema": map[string]string{"type": "string", "contentMediaType": mediaBinary}}}}
	case o.formBody:
		item["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/x-www-form-urlencoded": map[string]any{
			"schema": map[string]any{"type": "object", "properties": map[string]any{"payload": map[string]string{"type": "string"}}}}}}
	}
	item["responses"] = b.responses(o)
	return item, nil
}

func (b *docBuilder) responses(o op) map[string]any {
	out := map[string]any{}
	ok := map[string]any{"description": http.StatusText(o.ok)}
	content := map[string]any{}
	switch {
	case o.okBody != nil && o.orFileError:
		content[mediaJSON] = map[string]any{"schema": map[string]any{"oneOf": []any{
			b.ref(o.okBody), b.ref(fsch("AIOFileFailure"))}}}
	case o.okBody != nil:
		content[mediaJSON] = map[string]any{"schema": b.ref(o.okBody)}
	}
	if o.okMedia != "" {
		content[o.okMedia] = map[string]any{"schema": map[string]string{"type": "string"}}
	}
	if o.okLines != nil {
		content[mediaNDJSON] = map[string]any{"schema": b.ref(o.okLines), "description": "one per line"}
	}
	if o.stream {
		content[mediaNDJSON] = map[string]any{
			"schema":      b.ref(sch("StreamEvent", streamEvent{})),
			"description": "one StreamEvent per line: decision, approval_pending, approval_resolved, stdout, stderr, keepalive, then exit (or error)",
		}
	}
	if len(content) > 0 {
		ok["content"] = content
	}
	out[strconv.Itoa(o.ok)] = ok
	for _, a := range o.alt {
		resp := map[string]any{"description": a.desc}
		if a.body != nil {
			resp["content"] = map[string]any{mediaJSON: map[string]any{"schema": b.ref(a.body)}}
		}
		out[strconv.Itoa(a.status)] = resp
	}
	errRef := b.errorRef(o.errBody)
	for _, st := range o.errs {
		out[strconv.Itoa(st)] = map[string]any{"description": http.StatusText(st),
			"content": map[string]any{mediaJSON: map[string]any{"schema": errRef}}}
	}
	return out
}

// errorRef is the schema of an error shape, with the code enumerated.
func (b *docBuilder) errorRef(shape errShape) map[string]any {
	var r *schemaRef
	switch shape {
	case errDeerFlow:
		r = fsch("DeerFlowError")
	case errAIO:
		r = fsch("AIOError")
	default:
		r = sch("Error", errorBody{})
	}
	_, had := b.schemas[r.name]
	ref := b.ref(r)
	if !had && b.schemas[r.name] != nil {
		enumerateCodes(b.schemas[r.name])
	}
	return ref
}

// enumerateCodes sets the enum of error.code to every stable code.
func enumerateCodes(s *jsonschema.Schema) {
	e := s.Properties["error"]
	if e == nil || e.Properties["code"] == nil {
		return
	}
	for _, c := range errcode.Codes() {
		e.Properties["code"].Enum = append(e.Properties["code"].Enum, string(c))
	}
}
