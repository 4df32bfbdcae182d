package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// The rules the gateway asks: one per run_code/execute, one per request a
// session's browser makes.
const (
	ExecQuery    = "data.sandgate.exec.decision"
	BrowserQuery = "data.sandgate.browser.decision"
)

// unsafeBuiltins are refused at compile time: a policy must not reach the
// network (http.send, DNS) or read the gateway's environment (opa.runtime
// exposes env vars, where tokens live).
var unsafeBuiltins = map[string]struct{}{
	"http.send":          {},
	"net.lookup_ip_addr": {},
	"opa.runtime":        {},
}

// ErrInvalidPolicy wraps every reason a policy tree is rejected.
var ErrInvalidPolicy = errors.New("invalid policy")

// compiled is one prepared revision of the policy tree.
type compiled struct {
	exec    rego.PreparedEvalQuery
	browser rego.PreparedEvalQuery
	egress  rego.PreparedEvalQuery
	// egressExpand is the egress rules' expansion, evaluated when the
	// data changes (egress_derive.go), not per decision.
	egressExpand rego.PreparedEvalQuery
	// networkScopes is whom the data grants network, per mode, evaluated
	// with egressExpand (egress_derive.go).
	networkScopes rego.PreparedEvalQuery
	// prepareOn prepares another query on this revision's modules, as
	// the ones above were, over store (a candidate replay's,
	// egress_replay.go).
	prepareOn func(ctx context.Context, store storage.Store, query string) (rego.PreparedEvalQuery, error)
	revision  string
	files     []string
	loadedAt  time.Time
	// bundles is the manifest revision of each OPA bundle the revision
	// was built from (empty for a folder): decision logs carry it.
	bundles map[string]string
	// modules, sources and data are what was compiled, kept so a folder's
	// policy can be mirrored into OPA's plugin manager (its decision-log
	// mask rules live there). sources is empty for bundles.
	modules map[string]*ast.Module
	sources map[string][]byte
	data    map[string]any
	// store is the data the prepared queries read: overlays (overlay.go)
	// write into it, and candidate replays write into a transaction of it
	// that they abort.
	store storage.Store
}

// policyFile is one file of the tree, read once and used for both the
// revision hash and compilation, so the hash always names what was compiled.
type policyFile struct {
	path    string
	content []byte
}

// isTest reports whether a file is a Rego unit test. Tests are loaded by the
// test runner only, never into the serving policy.
func isTest(p string) bool { return strings.HasSuffix(p, "_test.rego") }

// readTree reads the .rego files and data.json documents of fsys. Other files
// are ignored on purpose: OPA would merge any stray JSON (an example input,
// a schema) into data, which is a silent way to change decisions.
func readTree(fsys fs.FS, withTests bool) ([]policyFile, error) {
	var files []policyFile
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".rego") || path.Base(p) == "data.json") {
			return nil
		}
		if isTest(p) && !withTests {
			return nil
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files = append(files, policyFile{path: p, content: b})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read policy tree: %w", err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files, nil
}

// revisionOf is a content hash over the served files (paths and bytes).
func revisionOf(files []policyFile) string {
	h := sha256.New()
	for _, f := range files {
		if isTest(f.path) {
			continue
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f.path, len(f.content))
		h.Write(f.content)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// parseTree turns files into modules and one data document. data.json at
// a/b/data.json lands at data.a.b, as `opa eval -d` would place it.
func parseTree(files []policyFile) (map[string]*ast.Module, map[string]any, error) {
	modules := make(map[string]*ast.Module)
	data := make(map[string]any)
	var errs []error
	popts := ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true}
	for _, f := range files {
		if strings.HasSuffix(f.path, ".rego") {
			m, err := ast.ParseModuleWithOpts(f.path, string(f.content), popts)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			modules[f.path] = m
			continue
		}
		if err := mergeData(data, f); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return modules, data, nil
}

func mergeData(root map[string]any, f policyFile) error {
	dec := json.NewDecoder(bytes.NewReader(f.content))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	node := root
	if dir := path.Dir(f.path); dir != "." {
		for _, seg := range strings.Split(dir, "/") {
			next, ok := node[seg].(map[string]any)
			if !ok {
				if _, taken := node[seg]; taken {
					return fmt.Errorf("%s: data path %q conflicts with a value", f.path, seg)
				}
				next = make(map[string]any)
				node[seg] = next
			}
			node = next
		}
	}
	for k, v := range doc {
		if _, dup := node[k]; dup {
			return fmt.Errorf("%s: key %q is defined twice", f.path, k)
		}
		node[k] = v
	}
	return nil
}

// loadSchemas reads the input schemas shipped with the binary. A schema file
// name.json is referenced from Rego METADATA as schema.name.
func loadSchemas() (*ast.SchemaSet, error) {
	ss := ast.NewSchemaSet()
	entries, err := fs.ReadDir(schemaFiles, "schemas")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := schemaFiles.ReadFile("schemas/" + e.Name())
		if err != nil {
			return nil, err
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
		name := strings.TrimSuffix(e.Name(), ".json")
		ss.Put(ast.MustParseRef("schema."+name), doc)
	}
	return ss, nil
}

// compileTree reads, checks and prepares a policy tree. Any problem is an
// ErrInvalidPolicy; the caller keeps its last good revision.
func compileTree(ctx context.Context, fsys fs.FS, schemas *ast.SchemaSet) (*compiled, error) {
	files, err := readTree(fsys, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	modules, data, err := parseTree(files)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	c, err := compileParsed(ctx, modules, data, schemas)
	if err != nil {
		return nil, err
	}
	c.revision = revisionOf(files)
	c.sources = make(map[string][]byte, len(files))
	for _, f := range files {
		c.files = append(c.files, f.path)
		if strings.HasSuffix(f.path, ".rego") {
			c.sources[f.path] = f.content
		}
	}
	return c, nil
}

// compileParsed checks and prepares parsed modules over data, wherever they
// came from (a folder or an OPA bundle). The caller sets the revision and
// the file list.
func compileParsed(ctx context.Context, modules map[string]*ast.Module, data map[string]any, schemas *ast.SchemaSet) (*compiled, error) {
	if !definesRule(modules, "sandgate.exec", "decision") {
		return nil, fmt.Errorf("%w: no rule %s", ErrInvalidPolicy, ExecQuery)
	}
	store := inmem.NewFromObjectWithOpts(data, inmem.OptReturnASTValuesOnRead(true))
	prepareOn := func(ctx context.Context, store storage.Store, query string) (rego.PreparedEvalQuery, error) {
		opts := []func(*rego.Rego){
			rego.Query(query),
			rego.Store(store),
			rego.Strict(true),
			rego.StrictBuiltinErrors(true),
			rego.Schemas(schemas),
			rego.UnsafeBuiltins(unsafeBuiltins),
		}
		for _, m := range modules {
			opts = append(opts, rego.ParsedModule(m))
		}
		pq, err := rego.New(opts...).PrepareForEval(ctx)
		if err != nil {
			return pq, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
		}
		return pq, nil
	}
	prepare := func(ctx context.Context, query string) (rego.PreparedEvalQuery, error) {
		return prepareOn(ctx, store, query)
	}
	c := &compiled{loadedAt: time.Now(), modules: modules, data: data, store: store, prepareOn: prepareOn}
	var err error
	if c.exec, err = prepare(ctx, ExecQuery); err != nil {
		return nil, err
	}
	// A tree without sandgate.browser still loads: its browser decisions
	// are undefined, which Decide turns into deny.
	if c.browser, err = prepare(ctx, BrowserQuery); err != nil {
		return nil, err
	}
	// Likewise without sandgate.egress: every connection is denied.
	if c.egress, err = prepare(ctx, EgressQuery); err != nil {
		return nil, err
	}
	if c.egressExpand, err = prepare(ctx, egressExpandQuery); err != nil {
		return nil, err
	}
	if c.networkScopes, err = prepare(ctx, networkScopesQuery); err != nil {
		return nil, err
	}
	err = storage.Txn(ctx, store, storage.WriteParams, func(txn storage.Transaction) error {
		return deriveEgress(ctx, c, txn)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: derived egress rules: %w", ErrInvalidPolicy, err)
	}
	return c, nil
}

// definesRule reports whether some module in package pkg has a rule name.
// Checked at load so that deleting the decision rule is a rejected reload,
// not a gateway that denies everything.
func definesRule(modules map[string]*ast.Module, pkg, name string) bool {
	want := ast.MustParseRef("data." + pkg)
	for _, m := range modules {
		if !m.Package.Path.Equal(want) {
			continue
		}
		for _, r := range m.Rules {
			if r.Head.Name.String() == name || r.Head.Ref().String() == name {
				return true
			}
		}
	}
	return false
}
