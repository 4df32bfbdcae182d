package policy

import (
	"embed"
	"io/fs"
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
