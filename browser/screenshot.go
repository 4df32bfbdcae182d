package browser

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"image/png"
	"io/fs"
	"math"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sandgate/sandgate/errcode"
)

// Path errors. The messages help the client fix its request and say
// nothing about the host.
var (
	errPathTraversal = errcode.New(errcode.PathTraversal, "the path is not inside the workspace")
	errPathIsDir     = errcode.New(errcode.InvalidRequest, "the screenshot path names a directory")
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
// the workspace. It is lexical; os.Root confines the write itself, symlinks
// included.
func cleanWorkspacePath(p string) (string, error) {
	switch {
	case len(p) > maxPathBytes:
		return "", fmt.Errorf("must be at most %d bytes", maxPathBytes)
	case strings.ContainsRune(p, 0), strings.ContainsRune(p, '\\'):
		return "", errors.New("must not contain NUL or backslash")
	case strings.HasSuffix(p, "/"):
		return "", errors.New("must name a file, not a directory")
	}
	if strings.HasPrefix(p, "/") {
		rest, ok := strings.CutPrefix(p, "/workspace/")
		if !ok {
			return "", errors.New("absolute paths must start with /workspace/")
		}
		p = rest
	}
	c := path.Clean(p)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") || strings.HasPrefix(c, "/") {
		return "", errors.New("must stay inside the workspace")
	}
	return c, nil
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

// writeWorkspaceFile writes data at rel in the session's workspace, owned
// by the session's identity, through an os.Root on the workspace (so a
// symlink planted by the session's code cannot lead the gateway outside).
// Missing parents are created and given to the session too. The file is
// written under a temporary name and renamed into place: an existing name
// is replaced, never written through (a hard link the session planted
// keeps its other name's content).
func (m *Manager) writeWorkspaceFile(ctx context.Context, sessionID, rel string, data []byte) error {
	dir, err := m.deps.Workspaces.Ensure(ctx, sessionID)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir.Path)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	chown := os.Geteuid() == 0 && dir.UID != 0
	parent := path.Dir(rel)
	if parent != "." {
		if err := mkdirAllOwned(root, parent, dir.UID, dir.GID, chown); err != nil {
			return err
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(parent, ".sandgate-"+hex.EncodeToString(rnd[:])+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return pathError(err)
	}
	werr := func() error {
		if chown {
			if err := f.Chown(dir.UID, dir.GID); err != nil {
				return fmt.Errorf("chown screenshot: %w", err)
			}
		}
		if _, err := f.Write(data); err != nil {
			return fmt.Errorf("write screenshot: %w", err)
		}
		return nil
	}()
	if cerr := f.Close(); werr == nil && cerr != nil {
		werr = fmt.Errorf("write screenshot: %w", cerr)
	}
	if werr == nil {
		if fi, err := root.Lstat(rel); err == nil && fi.IsDir() {
			werr = errPathIsDir
		} else if err := root.Rename(tmp, rel); err != nil {
			werr = pathError(err)
		}
	}
	if werr != nil {
		_ = root.Remove(tmp)
	}
	return werr
}

// mkdirAllOwned creates each missing directory of rel, owned by the
// session's identity.
func mkdirAllOwned(root *os.Root, rel string, uid, gid int, chown bool) error {
	cur := ""
	for _, part := range strings.Split(rel, "/") {
		cur = path.Join(cur, part)
		err := root.Mkdir(cur, 0o755)
		switch {
		case err == nil:
			if chown {
				d, err := root.Open(cur)
				if err != nil {
					return pathError(err)
				}
				err = d.Chown(uid, gid)
				_ = d.Close()
				if err != nil {
					return fmt.Errorf("chown screenshot dir: %w", err)
				}
			}
		case errors.Is(err, fs.ErrExist):
			fi, serr := root.Stat(cur)
			if serr != nil {
				return pathError(serr)
			}
			if !fi.IsDir() {
				return errcode.New(errcode.InvalidRequest, "a parent of the screenshot path is not a directory")
			}
		default:
			return pathError(err)
		}
	}
	return nil
}

// pathError maps an os.Root refusal (a symlink leading out) to
// path_traversal; other failures stay internal.
func pathError(err error) error {
	if errors.Is(err, errEscapes()) {
		return errors.Join(errPathTraversal, err)
	}
	return err
}

// errEscapes is os.Root's unexported "path escapes from parent" error,
// captured once from a real Root (a leading "/" is refused before any file
// system access), so that it is matched by identity, not by its text.
var errEscapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot("/")
	if err != nil {
		return errors.New("browser: os.Root escape error not captured")
	}
	defer r.Close()
	_, err = r.Lstat("/")
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return errors.New("browser: os.Root escape error not captured")
})
