package aio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BrowserCDP returns a Chrome DevTools Protocol WebSocket URL for the
// session's sandbox browser, starting the instance (when the session has
// none, through PoolConfig.Workspaces) and Chromium on demand
// (GET /v1/browser/info).
//
// The sandbox has no network, so the URL points at a forwarder the
// executor runs on 127.0.0.1 (an ephemeral port): ws://127.0.0.1:PORT/
// <token>/cdp/devtools/browser/<id>. The token is a per-instance secret
// (192 bits) that the forwarder checks before proxying to sandboxd with
// the instance's API key; a CDP client such as chromedp needs no headers.
// While a connection is open the instance is held (BUSY), so the idle
// reaper cannot remove it under the browser router. The URL stops working
// when the instance is destroyed; ask again then.
func (e *Executor) BrowserCDP(ctx context.Context, sessionID string) (string, error) {
	if e.closed.Load() {
		return "", unavailable("executor closed", nil)
	}
	l, err := e.pool.acquireExisting(ctx, sessionID)
	if errors.Is(err, errNoInstance) {
		if e.cfg.Workspaces == nil {
			return "", fmt.Errorf("aio: session %q has no instance and no workspace resolver is configured", sessionID)
		}
		ws, werr := e.cfg.Workspaces(ctx, sessionID)
		if werr != nil {
			return "", fmt.Errorf("aio: resolve workspace: %w", werr)
		}
		if ws.UID == 0 && ws.GID == 0 {
			ws.UID, ws.GID = e.cfg.SandboxUID, e.cfg.SandboxGID
		}
		l, err = e.acquire(ctx, sessionID, ws)
	}
	if err != nil {
		return "", err
	}
	defer l.release(false)
	bctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	info, err := l.client().BrowserInfo(bctx)
	if err != nil {
		return "", classify(ctx, bctx, err)
	}
	u, err := url.Parse(info.CDPURL)
	if err != nil || u.Path == "" {
		return "", fmt.Errorf("aio: sandbox returned an unusable cdp_url %q", info.CDPURL)
	}
	token := e.pool.cdpToken(l.in)
	addr, err := e.cdp.start()
	if err != nil {
		return "", err
	}
	return "ws://" + addr + "/" + token + u.Path, nil
}

// cdpToken returns the instance's forwarder token, making it on first use.
func (p *pool) cdpToken(in *instance) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if in.cdpToken == "" {
		in.cdpToken = newToken()
	}
	return in.cdpToken
}

// sessionForToken finds the session whose live instance has token.
func (p *pool) sessionForToken(token string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s, in := range p.bySession {
		if in.cdpToken != "" && in.cdpToken == token && in.state != stateDestroying {
			return s, true
		}
	}
	return "", false
}

// cdpForwarder is the loopback HTTP/WebSocket proxy in front of every
// instance's /cdp endpoints.
type cdpForwarder struct {
	p    *pool
	mu   sync.Mutex
	srv  *http.Server
	addr string
}

func newCDPForwarder(p *pool) *cdpForwarder { return &cdpForwarder{p: p} }

// start listens on 127.0.0.1 once and returns the address.
func (f *cdpForwarder) start() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv != nil {
		return f.addr, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("aio: CDP forwarder: %w", err)
	}
	f.addr = ln.Addr().String()
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f.addr, nil
}

func (f *cdpForwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv != nil {
		// Close, not Shutdown: hijacked WebSocket connections are not
		// tracked by the server, and the instances behind them are going.
		_ = f.srv.Close()
	}
}

func (f *cdpForwarder) serve(w http.ResponseWriter, r *http.Request) {
	token, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	session, ok := f.p.sessionForToken(token)
	if !ok || token == "" {
		http.Error(w, "unknown CDP endpoint", http.StatusNotFound)
		return
	}
	l, err := f.p.acquireExisting(r.Context(), session)
	if err != nil {
		http.Error(w, "sandbox unavailable", http.StatusServiceUnavailable)
		return
	}
	defer l.release(false)
	c := l.client()
	target, _ := url.Parse(c.base)
	prefix := "ws://" + r.Host + "/"
	rp := &httputil.ReverseProxy{
		Transport: c.tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+rest, ""
			pr.Out.Host = r.Host
			pr.Out.Header.Set("X-AIO-API-Key", c.key)
			pr.Out.Header.Del("Origin")
		},
		ModifyResponse: func(res *http.Response) error {
			if !strings.Contains(res.Request.URL.Path, "/json") {
				return nil
			}
			// Discovery answers name WebSocket URLs under the sandbox's
			// paths: put the token in front.
			body, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
			_ = res.Body.Close()
			if err != nil {
				return err
			}
			body = bytes.ReplaceAll(body, []byte(prefix), []byte(prefix+token+"/"))
			res.Body = io.NopCloser(bytes.NewReader(body))
			res.ContentLength = int64(len(body))
			res.Header.Set("Content-Length", strconv.Itoa(len(body)))
			return nil
		},
	}
	rp.ServeHTTP(w, r)
}
