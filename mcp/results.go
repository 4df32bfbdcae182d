package mcp

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/executors"
)

// viewResults is a stateful run's results as structuredContent: each MIME
// bundle decoded, so the output schema can say "object".
func viewResults(cell *executors.CellResult) []map[string]any {
	if cell == nil || len(cell.Results) == 0 {
		return nil
	}
	bs := cell.Results
	out := make([]map[string]any, 0, len(bs))
	for _, b := range bs {
		m := make(map[string]any, len(b))
		for mime, raw := range b {
			var v any
			if json.Unmarshal(raw, &v) == nil {
				m[mime] = v
			}
		}
		out = append(out, m)
	}
	return out
}

// resultContent is each result as the content a model sees, in order and
// in its richest form a client can show: an image as image content (a
// figure's text/plain, "<Figure size ...>", says nothing more), HTML as
// text (a DataFrame's table), then plain text, then JSON.
func resultContent(results []map[string]any) []sdk.Content {
	var out []sdk.Content
	for _, b := range results {
		if c := bundleContent(b); c != nil {
			out = append(out, c)
		}
	}
	return out
}

func bundleContent(b map[string]any) sdk.Content {
	if s, ok := b["image/png"].(string); ok {
		if data, err := decode64(s); err == nil {
			return &sdk.ImageContent{Data: data, MIMEType: "image/png"}
		}
	}
	if s, ok := b["image/jpeg"].(string); ok {
		if data, err := decode64(s); err == nil {
			return &sdk.ImageContent{Data: data, MIMEType: "image/jpeg"}
		}
	}
	if s, ok := b["image/svg+xml"].(string); ok {
		return &sdk.ImageContent{Data: []byte(s), MIMEType: "image/svg+xml"}
	}
	for _, mime := range []string{"text/html", "text/markdown", "text/plain"} {
		if s, ok := b[mime].(string); ok {
			return &sdk.TextContent{Text: s}
		}
	}
	if v, ok := b["application/json"]; ok {
		if j, err := json.Marshal(v); err == nil {
			return &sdk.TextContent{Text: string(j)}
		}
	}
	return nil
}

// decode64 decodes a bundle's base64 image; some kernels wrap or end it
// with newlines.
func decode64(s string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, s))
}
