package confirm

import (
	"embed"
	"io/fs"
)

//go:embed web
var webFS embed.FS

// WebAssets is the approval page: index.html, app.js and app.css, plain
// files with no build step. The api serves them at GET / (the page is
// static and public; it authenticates its socket with the approver's token).
func WebAssets() fs.FS {
	sub, err := fs.Sub(webFS, "web")
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return sub
}
