package policy

import (
	"embed"
	"io/fs"
	"testing/fstest"
)

//go:embed rego
var defaultPolicy embed.FS

//go:embed schemas
var schemaFiles embed.FS

// DefaultFS is the policy tree shipped with the binary (policy/rego). The
// gateway uses it when no policy directory is configured, so a fresh
// `go run ./cmd/gateway` enforces the documented mode table.
func DefaultFS() fs.FS {
	sub, err := fs.Sub(defaultPolicy, "rego")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	return sub
}

// DefaultTree is DefaultFS copied into an in-memory tree that a caller can
// edit (a data.json with other rules) and load: the tests and benchmarks
// that run the shipped policy with data of their own.
func DefaultTree() (fstest.MapFS, error) {
	out := fstest.MapFS{}
	src := DefaultFS()
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(src, p)
		out[p] = &fstest.MapFile{Data: b}
		return err
	})
	return out, err
}
