package policy

import (
	"context"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestRegoUnitTests runs the *_test.rego files shipped next to the policy
// through OPA's own test runner, so `go test` alone catches a policy edit
// that breaks the mode table (make test also runs `opa test --coverage`).
func TestRegoUnitTests(t *testing.T) {
	files, err := readTree(DefaultFS(), true)
	if err != nil {
		t.Fatal(err)
	}
	modules, data, err := parseTree(files)
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := loadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store := inmem.NewFromObject(data)
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Abort(ctx, txn)
	compiler := ast.NewCompiler().WithSchemas(schemas).WithUseTypeCheckAnnotations(true).WithStrict(true)
	ch, err := tester.NewRunner().SetCompiler(compiler).SetStore(store).SetModules(modules).
		SetTimeout(30*time.Second).RaiseBuiltinErrors(true).RunTests(ctx, txn)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r := range ch {
		n++
		if r.Error != nil {
			t.Errorf("%s.%s: error: %v", r.Package, r.Name, r.Error)
		} else if r.Fail {
			t.Errorf("%s.%s: FAIL (%s:%d)", r.Package, r.Name, r.Location.File, r.Location.Row)
		}
	}
	if n < 10 {
		t.Fatalf("ran %d Rego tests, want at least 10: are the _test.rego files loaded?", n)
	}
}
