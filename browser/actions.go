package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

// action is one parsed, validated browser action.
type action interface {
	timeout(cfg *Config) time.Duration
	do(ctx context.Context, e *env) (any, error)
}

// env is what an action runs against.
type env struct {
	m   *Manager
	in  *instance
	req Request
	rec *audit.Record
}

// Results of the actions.
type (
	// NavigateResult is where the navigation ended (after redirects).
	NavigateResult struct {
		URL    string `json:"url"`
		Title  string `json:"title"`
		Status int64  `json:"status"`
	}
	// PageResult is the page an action left the tab on.
	PageResult struct {
		URL    string `json:"url"`
		Title  string `json:"title"`
		Status int64  `json:"status,omitempty"` // click with wait_navigation, back
	}
	// TypeResult counts the characters typed.
	TypeResult struct {
		Chars int `json:"chars"`
	}
	// WaitForResult is the state that was reached.
	WaitForResult struct {
		State string `json:"state"`
	}
	// ContentResult is the page's (or an element's) text or HTML.
	ContentResult struct {
		Format    string `json:"format"`
		Content   string `json:"content"`
		Bytes     int    `json:"bytes"`
		Truncated bool   `json:"truncated"`
	}
	// ScreenshotResult is where the PNG was saved.
	ScreenshotResult struct {
		Path     string `json:"path"` // /workspace/...
		Width    int    `json:"width"`
		Height   int    `json:"height"`
		Bytes    int    `json:"bytes"`
		FullPage bool   `json:"full_page"`
		Base64   string `json:"base64,omitempty"`
	}
	// ScrollResult is the scroll position afterwards.
	ScrollResult struct {
		X float64 `json:"x"`
		Y float64 `json:"y"`
	}
	// CloseResult says whether a browser was open.
	CloseResult struct {
		Closed bool `json:"closed"`
	}
)

// ---- navigate

type navigateAction struct {
	common
	URL string `json:"url"`
}

func (a *navigateAction) validate(cfg *Config, fs *[]FieldError) {
	a.check(cfg, fs)
	switch t, ok := targetOf(a.URL); {
	case a.URL == "":
		*fs = append(*fs, FieldError{Field: "params.url", Code: "required", Message: "a URL is required"})
	case len(a.URL) > maxURLBytes:
		*fs = append(*fs, FieldError{Field: "params.url", Code: "max", Message: fmt.Sprintf("must be at most %d bytes", maxURLBytes)})
	case !ok || !utf8.ValidString(a.URL):
		*fs = append(*fs, FieldError{Field: "params.url", Code: "url", Message: "must be an absolute URL"})
	case isNetworkScheme(t.scheme) && t.host == "":
		*fs = append(*fs, FieldError{Field: "params.url", Code: "url", Message: "must name a host"})
	}
}

// precheck decides the typed URL before the browser sees it (and before
// one is started for it): schemes the Fetch domain never pauses
// (javascript:, chrome:, data:) stop here.
func (a *navigateAction) precheck(ctx context.Context, g *guard, rec *audit.Record) (*typedURL, error) {
	t, _ := targetOf(a.URL)
	t.navigation, t.resourceType, t.method = true, string(network.ResourceTypeDocument), "GET"
	rec.Detail["scheme"] = t.scheme
	if t.host != "" {
		rec.Detail["host"] = t.host
	}
	v := g.decide(ctx, t, layerAction)
	if !v.decision.Allowed() {
		return nil, &DeniedError{Reasons: v.decision.Reasons, PolicyRevision: v.decision.PolicyRevision}
	}
	// A navigation let through by dryrun or warn reasons: the action's
	// record says what it would have been, as the request's does.
	rec.WouldBe = v.decision.WouldBe
	return &typedURL{raw: a.URL, v: v}, nil
}

func (a *navigateAction) do(ctx context.Context, e *env) (any, error) {
	t, _ := targetOf(a.URL)
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(a.URL))
	origins := []string{t.origin()}
	if resp != nil {
		if rt, ok := targetOf(resp.URL); ok {
			origins = append(origins, rt.origin())
		}
	}
	if b := e.in.guard.blockedNavigation(e.in.mainFrame, origins); b != nil {
		return nil, &DeniedError{Reasons: b.Reasons}
	}
	if err != nil {
		return nil, navError(err)
	}
	return e.in.page(ctx, resp)
}

// blockedNavigation returns the denial of the tab's own document, if the
// running action saw one: a main-frame document the Fetch layer failed (a
// redirect hop, say), or a proxy refusal for the navigation's origin.
func (g *guard) blockedNavigation(mainFrame string, origins []string) *Blocked {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.action == nil {
		return nil
	}
	for i := range g.action.blocked {
		b := &g.action.blocked[i]
		if b.Navigation && b.frameID == mainFrame && b.Layer == layerFetch {
			return b
		}
		if b.Layer == layerProxy {
			for _, o := range origins {
				if o == b.URL {
					return b
				}
			}
		}
	}
	return nil
}

// page describes the tab's current document. The browser process keeps
// the URL and title in the navigation history, so asking it does not wait
// on a renderer still busy with the page it just loaded.
func (in *instance) page(ctx context.Context, resp *network.Response) (PageResult, error) {
	hist, err := chromedp.Run(ctx, chromedp.NavigationEntries())
	if err != nil {
		return PageResult{}, err
	}
	var out PageResult
	if i := int(hist.CurrentIndex); i >= 0 && i < len(hist.Entries) {
		out = PageResult{URL: hist.Entries[i].URL, Title: hist.Entries[i].Title}
	}
	if resp != nil {
		out.Status = resp.Status
	}
	return out, nil
}

var netErrRe = regexp.MustCompile(`^net::ERR_[A-Z0-9_]+$`)

// navError turns a failed load into navigation_failed, naming Chromium's
// net error (it describes the page's server, not the gateway).
func navError(err error) error {
	var le *chromedp.LoadError
	if errors.As(err, &le) {
		if netErrRe.MatchString(le.ErrorText) {
			return errors.Join(errcode.New(errcode.NavigationFailed, "the page could not be loaded: "+le.ErrorText), err)
		}
		return errors.Join(ErrNavigation, err)
	}
	return err
}

// ---- click

type clickAction struct {
	common
	Selector string `json:"selector"`
	// WaitNavigation waits for the navigation the click starts to load.
	WaitNavigation bool `json:"wait_navigation"`
}

func (a *clickAction) validate(cfg *Config, fs *[]FieldError) {
	a.check(cfg, fs)
	checkSelector(a.Selector, true, fs)
}

func (a *clickAction) do(ctx context.Context, e *env) (any, error) {
	click := chromedp.Click(chromedp.CSS(a.Selector), chromedp.NodeVisible)
	var resp *network.Response
	var err error
	if a.WaitNavigation {
		resp, err = chromedp.RunResponse(ctx, click)
		if b := e.in.guard.blockedNavigation(e.in.mainFrame, nil); b != nil {
			return nil, &DeniedError{Reasons: b.Reasons}
		}
	} else {
		err = chromedp.Do(ctx, click)
	}
	if err != nil {
		return nil, selectorError(ctx, e, a.Selector, navError(err))
	}
	return e.in.page(ctx, resp)
}

// ---- type

type typeAction struct {
	common
	Selector string  `json:"selector"`
	Text     *string `json:"text"`
	// Clear empties the field before typing.
	Clear bool `json:"clear"`
}

func (a *typeAction) validate(cfg *Config, fs *[]FieldError) {
	a.check(cfg, fs)
	checkSelector(a.Selector, true, fs)
	switch {
	case a.Text == nil:
		*fs = append(*fs, FieldError{Field: "params.text", Code: "required", Message: "the text to type is required"})
	case len(*a.Text) > maxTypeBytes:
		*fs = append(*fs, FieldError{Field: "params.text", Code: "max", Message: fmt.Sprintf("must be at most %d bytes", maxTypeBytes)})
	case !utf8.ValidString(*a.Text):
		*fs = append(*fs, FieldError{Field: "params.text", Code: "invalid", Message: "must be valid UTF-8"})
	}
}

func (a *typeAction) do(ctx context.Context, e *env) (any, error) {
	sel := chromedp.CSS(a.Selector)
	var steps []chromedp.Action[chromedp.Void]
	if a.Clear {
		steps = append(steps, chromedp.Clear(sel, chromedp.NodeVisible))
	}
	steps = append(steps, chromedp.SendKeys(sel, *a.Text, chromedp.NodeVisible))
	if err := chromedp.Do(ctx, steps...); err != nil {
		return nil, selectorError(ctx, e, a.Selector, err)
	}
	return TypeResult{Chars: utf8.RuneCountInString(*a.Text)}, nil
}

// ---- wait_for

var waitStates = []string{"visible", "present", "hidden", "absent"}

type waitForAction struct {
	common
	Selector string `json:"selector"`
	// State is visible (default), present, hidden or absent.
	State string `json:"state"`
}

func (a *waitForAction) validate(cfg *Config, fs *[]FieldError) {
	a.check(cfg, fs)
	checkSelector(a.Selector, true, fs)
	oneOf("params.state", a.State, waitStates, fs)
}

func (a *waitForAction) do(ctx context.Context, e *env) (any, error) {
	sel := chromedp.CSS(a.Selector)
	state := a.State
	if state == "" {
		state = "visible"
	}
	var step chromedp.Action[chromedp.Void]
	switch state {
	case "visible":
		step = chromedp.WaitVisible(sel)
	case "present":
		step = chromedp.WaitReady(sel)
	case "hidden":
		step = chromedp.WaitNotVisible(sel)
	default:
		step = chromedp.WaitNotPresent(sel)
	}
	if err := chromedp.Do(ctx, step); err != nil {
		return nil, selectorError(ctx, e, a.Selector, err)
	}
	return WaitForResult{State: state}, nil
}

// ---- content

var contentFormats = []string{"text", "html"}

type contentAction struct {
	common
	// Format is text (default: the rendered text) or html.
	Format string `json:"format"`
	// Selector narrows the content to the first matching element.
	Selector string `json:"selector"`
	// MaxBytes caps the content below the configured cap.
	MaxBytes int `json:"max_bytes"`
}

func (a *contentAction) validate(cfg *Config, fs *[]FieldError) {
	a.check(cfg, fs)
	checkSelector(a.Selector, false, fs)
	oneOf("params.format", a.Format, contentFormats, fs)
	if a.MaxBytes < 0 || a.MaxBytes > cfg.MaxContentBytes {
		*fs = append(*fs, FieldError{Field: "params.max_bytes", Code: "range", Message: fmt.Sprintf("must be between 0 and %d", cfg.MaxContentBytes)})
	}
}

// contentJS reads the text or HTML of the document or of an element, cut
// at a character count in the page so that a huge page never crosses CDP
// whole. It returns null when the selector matches nothing.
const contentJS = `(() => {
	const sel = %s, html = %t, max = %d;
	const el = sel ? document.querySelector(sel) : (html ? document.documentElement : (document.body || document.documentElement));
	if (!el) return sel ? null : {s: "", t: false};
	const s = (html ? el.outerHTML : (el.innerText ?? el.textContent)) || "";
	return {s: s.length > max ? s.slice(0, max) : s, t: s.length > max};
})()`

type contentOut struct {
	S string `json:"s"`
	T bool   `json:"t"`
}

func (a *contentAction) do(ctx context.Context, e *env) (any, error) {
	format := a.Format
	if format == "" {
		format = "text"
	}
	limit := a.MaxBytes
	if limit == 0 {
		limit = e.m.cfg.MaxContentBytes
	}
	sel, _ := json.Marshal(a.Selector) // a JS string literal (U+2028/9 escaped)
	expr := fmt.Sprintf(contentJS, sel, format == "html", limit)
	out, err := chromedp.Run(ctx, chromedp.Evaluate[*contentOut](expr))
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, ErrNoElement
	}
	s, cut := truncateUTF8(out.S, limit)
	return ContentResult{Format: format, Content: s, Bytes: len(s), Truncated: cut || out.T}, nil
}

// truncateUTF8 cuts s to at most n bytes at a rune boundary.
func truncateUTF8(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// ---- scroll

type scrollAction struct {
	common
	X int `json:"x"`
	Y int `json:"y"`
	// To is top or bottom of the page.
	To string `json:"to"`
	// Selector scrolls an element into view.
	Selector string `json:"selector"`
}

func (a *scrollAction) validate(cfg *Config, fs *[]FieldError) {
	a.check(cfg, fs)
	checkSelector(a.Selector, false, fs)
	oneOf("params.to", a.To, []string{"top", "bottom"}, fs)
	modes := 0
	if a.X != 0 || a.Y != 0 {
		modes++
	}
	if a.To != "" {
		modes++
	}
	if a.Selector != "" {
		modes++
	}
	if modes != 1 {
		*fs = append(*fs, FieldError{Field: "params", Code: "oneof", Message: "give exactly one of: x/y (pixels to scroll by), to (top|bottom), selector"})
	}
	if abs(a.X) > maxScrollPixels || abs(a.Y) > maxScrollPixels {
		*fs = append(*fs, FieldError{Field: "params.y", Code: "range", Message: fmt.Sprintf("x and y must be within ±%d", maxScrollPixels)})
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func (a *scrollAction) do(ctx context.Context, e *env) (any, error) {
	var err error
	switch {
	case a.Selector != "":
		err = chromedp.Do(ctx, chromedp.ScrollIntoView(chromedp.CSS(a.Selector)))
		if err != nil {
			return nil, selectorError(ctx, e, a.Selector, err)
		}
	case a.To == "top":
		err = chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	case a.To == "bottom":
		err = chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, (document.scrollingElement || document.documentElement).scrollHeight)`))
	default:
		err = chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`window.scrollBy(%d, %d)`, a.X, a.Y)))
	}
	if err != nil {
		return nil, err
	}
	pos, err := chromedp.Run(ctx, chromedp.Evaluate[ScrollResult](`({x: window.scrollX, y: window.scrollY})`))
	if err != nil {
		return nil, err
	}
	return pos, nil
}

// ---- back

type backAction struct {
	common
}

func (a *backAction) validate(cfg *Config, fs *[]FieldError) { a.check(cfg, fs) }

func (a *backAction) do(ctx context.Context, e *env) (any, error) {
	hist, err := chromedp.Run(ctx, chromedp.NavigationEntries())
	if err != nil {
		return nil, err
	}
	if hist.CurrentIndex <= 0 || int(hist.CurrentIndex) >= len(hist.Entries) {
		return nil, ErrNoHistory
	}
	prev := hist.Entries[hist.CurrentIndex-1]
	if t, ok := targetOf(prev.URL); ok {
		e.rec.Detail["scheme"] = t.scheme
		if t.host != "" {
			e.rec.Detail["host"] = t.host
		}
	}
	// A page restored from the back-forward cache (the aio browser may
	// keep one) loads nothing, so its restore also ends the wait.
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	var restored atomic.Bool
	if err := chromedp.Listen(lctx, func(ev any) {
		if fe, ok := ev.(*page.EventFrameNavigated); ok && fe.Frame != nil && fe.Frame.ParentID == "" &&
			fe.Type == page.NavigationTypeBackForwardCacheRestore {
			restored.Store(true)
			lcancel()
		}
	}); err != nil {
		return nil, err
	}
	resp, err := chromedp.RunResponse(lctx, chromedp.NavigateToHistoryEntry(prev.ID))
	if restored.Load() {
		resp, err = nil, nil
	}
	if b := e.in.guard.blockedNavigation(e.in.mainFrame, nil); b != nil {
		return nil, &DeniedError{Reasons: b.Reasons}
	}
	if err != nil {
		return nil, navError(err)
	}
	return e.in.page(ctx, resp)
}

// ---- close

type closeAction struct{}

func (closeAction) timeout(cfg *Config) time.Duration { return cfg.ActionTimeout }

func (closeAction) do(context.Context, *env) (any, error) { return CloseResult{}, nil }

// selectorError makes a protocol error of a query into invalid_request when
// the selector itself is what the browser rejected.
func selectorError(ctx context.Context, e *env, selector string, err error) error {
	var pe *cdproto.Error
	if !errors.As(err, &pe) || ctx.Err() != nil {
		return err
	}
	arg, _ := json.Marshal(selector)
	ok, verr := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(
		`(() => { try { document.createDocumentFragment().querySelector(%s); return true } catch (e) { return false } })()`, arg)))
	if verr == nil && !ok {
		return invalid("params.selector", "invalid", "is not a valid CSS selector")
	}
	return err
}
