package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"testing/fstest"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// The administrators' tools (sandgate policy check, test, diff) load a
// policy without a running gateway: a folder as the gateway loads one, or
// a bundle file as `opa build` writes it.

// OpenPath loads the policy at p for offline use: a folder, or an OPA
// bundle (.tar.gz). A bundle's signature is not verified here: the file is
// the administrator's own, being checked before it is published. The
// revision is the content hash of what was loaded; a bundle's manifest
// revision is returned beside it ("" for a folder).
func OpenPath(ctx context.Context, p string, opts Options) (*Engine, string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, "", fmt.Errorf("policy: %w", err)
	}
	opts.Source, opts.OPAConfig = SourceFolder, nil
	if st.IsDir() {
		opts.Dir, opts.FS = p, nil
		e, err := New(ctx, opts)
		return e, "", err
	}
	fsys, revision, err := bundleFS(p)
	if err != nil {
		return nil, "", err
	}
	opts.Dir, opts.FS = "", fsys
	e, err := New(ctx, opts)
	if err == nil {
		e.source = p
	}
	return e, revision, err
}

// bundleFS is a bundle file's modules and data as a policy tree: each
// module at its path, the data as one data.json at the root.
func bundleFS(p string) (fstest.MapFS, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, "", fmt.Errorf("policy bundle: %w", err)
	}
	defer f.Close()
	b, err := bundle.NewReader(f).WithSkipBundleVerification(true).
		WithRegoVersion(ast.RegoV1).Read()
	if err != nil {
		return nil, "", fmt.Errorf("%w: bundle %s: %w", ErrInvalidPolicy, p, err)
	}
	out := fstest.MapFS{}
	for _, m := range b.Modules {
		name := strings.TrimPrefix(path.Clean("/"+m.Path), "/")
		out[name] = &fstest.MapFile{Data: m.Raw}
	}
	if len(b.Data) > 0 {
		data, err := json.Marshal(b.Data)
		if err != nil {
			return nil, "", fmt.Errorf("policy bundle %s: %w", p, err)
		}
		out["data.json"] = &fstest.MapFile{Data: data}
	}
	return out, b.Manifest.Revision, nil
}

// TestResult is one Rego unit test's outcome, as `opa test` reports it.
type TestResult struct {
	Package  string        `json:"package"`
	Name     string        `json:"name"`
	File     string        `json:"file"`
	Row      int           `json:"row"`
	Pass     bool          `json:"pass"`
	Skip     bool          `json:"skip,omitempty"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// RunTests runs the *_test.rego files of fsys against its policy and data
// with the gateway's own compiler settings: strict, type-checked against
// the input schemas that ship with the binary (the schema.exec_input,
// schema.browser_input and schema.egress_input of the policy's METADATA),
// built-in errors raised. It is `opa test` as make test runs it, for an
// administrator's policy repository. An error is a tree that does not
// parse or compile; failing tests are results.
func RunTests(ctx context.Context, fsys fs.FS, timeout time.Duration) ([]TestResult, error) {
	files, err := readTree(fsys, true)
	if err != nil {
		return nil, err
	}
	modules, data, err := parseTree(files)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	schemas, err := loadSchemas()
	if err != nil {
		return nil, err
	}
	store := inmem.NewFromObject(data)
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, err
	}
	defer store.Abort(ctx, txn)
	//lint:ignore SA1019 the same refusal, and error, as the engine's rego.UnsafeBuiltins; capabilities would call them undefined
	compiler := ast.NewCompiler().WithSchemas(schemas).WithUseTypeCheckAnnotations(true).WithStrict(true).
		WithUnsafeBuiltins(unsafeBuiltins)
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ch, err := tester.NewRunner().SetCompiler(compiler).SetStore(store).SetModules(modules).
		SetTimeout(timeout).RaiseBuiltinErrors(true).RunTests(ctx, txn)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	var out []TestResult
	for r := range ch {
		tr := TestResult{Package: r.Package, Name: r.Name, Pass: !r.Fail && r.Error == nil && !r.Skip,
			Skip: r.Skip, Duration: r.Duration}
		if r.Location != nil {
			tr.File, tr.Row = r.Location.File, r.Location.Row
		}
		if r.Error != nil {
			tr.Error = r.Error.Error()
		}
		out = append(out, tr)
	}
	return out, nil
}
