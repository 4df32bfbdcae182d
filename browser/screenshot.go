package browser

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image/png"
	"math"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sandgate/sandgate/workspace"
)

type screenshotAction struct {
	common
	// FullPage captures the whole page (up to MaxFullPageHeight), not the
	// viewport.
	FullPage bool `json:"full_page"`
	// Path is where the PNG goes, relative to the workspace or under
	// /workspace/; default .sandgate/screenshots/<time>-<request>.png.
	Path string `json:"path"`
	// ReturnBase64 also returns the PNG in the response.
	ReturnBase64 bool `json:"return_base64"`
}

func (a *screenshotAction) validate(cfg *Config, fs *[]FieldError) {
	a.check(cfg, fs)
	if a.Path != "" {
		if _, err := cleanWorkspacePath(a.Path); err != nil {
			*fs = append(*fs, FieldError{Field: "params.path", Code: "path", Message: err.Error()})
		}
	}
}

// cleanWorkspacePath turns a client's path into a clean path relative to
// the workspace, by the workspace file API's own rules (ResolvePath), and
// requires it to name a file. It is lexical; the write itself goes through
// the workspace's os.Root, symlinks included.
func cleanWorkspacePath(p string) (string, error) {
	if strings.HasSuffix(p, "/") {
		return "", errors.New("must name a file, not a directory")
	}
	rel, err := workspace.ResolvePath(p)
	if err != nil {
		return "", err
	}
	if rel == "." {
		return "", errors.New("must name a file, not the workspace")
	}
	return rel, nil
}

func (a *screenshotAction) do(ctx context.Context, e *env) (any, error) {
	params := page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng, FromSurface: new(true)}
	if a.FullPage {
		m, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) (page.GetLayoutMetricsResult, error) {
			return cdp.Call(ctx, t, page.GetLayoutMetrics, cdp.Empty{})
		})
		if err != nil {
			return nil, err
		}
		w, h := float64(e.m.cfg.ViewportWidth), float64(e.m.cfg.ViewportHeight)
		if cs := m.CSSContentSize; cs != nil {
			w, h = math.Max(w, math.Ceil(cs.Width)), math.Max(h, math.Ceil(cs.Height))
		}
		w = math.Min(w, 8192)
		h = math.Min(h, float64(e.m.cfg.MaxFullPageHeight))
		params.CaptureBeyondViewport = new(true)
		params.Clip = &page.Viewport{X: 0, Y: 0, Width: w, Height: h, Scale: 1}
	}
	img, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, params)
		return r.Data, err
	})
	if err != nil {
		return nil, err
	}
	if len(img) > e.m.cfg.MaxScreenshotBytes {
		return nil, ErrTooLarge
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("screenshot is not a PNG: %w", err)
	}
	rel := DefaultScreenshotDir + "/" + time.Now().UTC().Format("20060102T150405.000Z") + "-" + safeName(e.req.RequestID) + ".png"
	if a.Path != "" {
		rel, _ = cleanWorkspacePath(a.Path)
	}
	if err := e.m.writeWorkspaceFile(ctx, e.req.SessionID, rel, img); err != nil {
		return nil, err
	}
	e.rec.Path = "/workspace/" + rel
	e.rec.Bytes = int64(len(img))
	out := ScreenshotResult{Path: "/workspace/" + rel, Width: cfg.Width, Height: cfg.Height, Bytes: len(img), FullPage: a.FullPage}
	if a.ReturnBase64 {
		out.Base64 = base64.StdEncoding.EncodeToString(img)
	}
	return out, nil
}

// safeName keeps a request id usable as part of a file name.
func safeName(s string) string {
	b := []byte(s)
	out := b[:0]
	for _, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "shot"
	}
	if len(out) > 64 {
		out = out[:64]
	}
	return string(out)
}

// writeWorkspaceFile writes data at rel in the session's workspace through
// the workspace file API, so a screenshot obeys what an agent's own write
// does: parents created and given to the session, the file replaced
// atomically (never written through a planted link), symlinks followed
// only inside the workspace, and the per-file limit and session quota.
func (m *Manager) writeWorkspaceFile(ctx context.Context, sessionID, rel string, data []byte) error {
	_, err := m.deps.Workspaces.Write(ctx, sessionID, rel, workspace.WriteOverwrite, bytes.NewReader(data))
	return err
}
