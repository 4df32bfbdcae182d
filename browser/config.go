package browser

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Defaults of Config. Every limit is on unless configured otherwise; none
// can be switched off.
const (
	DefaultChromiumPath       = "/usr/bin/chromium"
	DefaultIdleTTL            = 5 * time.Minute
	DefaultActionTimeout      = 30 * time.Second
	DefaultMaxActionTimeout   = 120 * time.Second
	DefaultStartTimeout       = 30 * time.Second
	DefaultDecisionTimeout    = 5 * time.Second
	DefaultMaxContentBytes    = 1 << 20
	DefaultMaxScreenshotBytes = 16 << 20
	DefaultMaxFullPageHeight  = 16384
	DefaultViewportWidth      = 1280
	DefaultViewportHeight     = 800
	DefaultMaxBrowsers        = 8
	// DefaultScreenshotDir is where screenshots go, relative to the
	// session's workspace, when the action names no path.
	DefaultScreenshotDir = ".sandgate/screenshots"
)

// Config tunes the browser router. The zero value is valid: every field
// takes the default documented on it.
type Config struct {
	// ChromiumPath is the browser binary of the external backend. Default
	// /usr/bin/chromium, else "chromium" on PATH.
	ChromiumPath string
	// ExtraFlags are added to the external Chromium's command line
	// ("--name" or "--name=value"), after the safe defaults. Flags the
	// SSRF design depends on (proxy, host resolution, headless, debugging
	// ports, user data dir) cannot be overridden: Validate refuses them.
	ExtraFlags []string
	// AllowHosts opens hosts ("host" or "host:port") to the external
	// backend although they resolve to loopback, private or metadata
	// addresses. It reaches the policy as input.allow_hosts; the scheme
	// checks still apply.
	AllowHosts []string
	// Mode is the security mode given to the policy (STRICT|PERMISSIVE).
	Mode string

	// IdleTTL closes a session's browser after this long without an
	// action. Default 5 minutes.
	IdleTTL time.Duration
	// ActionTimeout bounds an action that names no timeout_s; default 30 s.
	// MaxActionTimeout caps timeout_s; default 120 s.
	ActionTimeout    time.Duration
	MaxActionTimeout time.Duration
	// StartTimeout bounds starting (or attaching to) a browser; default 30 s.
	StartTimeout time.Duration
	// DecisionTimeout bounds the DNS lookup and policy evaluation of one
	// request the page makes; past it the request is denied. Default 5 s.
	DecisionTimeout time.Duration

	// MaxContentBytes caps the content action's text or HTML; default 1 MiB.
	MaxContentBytes int
	// MaxScreenshotBytes caps one PNG; default 16 MiB. MaxFullPageHeight
	// caps a full-page screenshot's height in CSS pixels; default 16384.
	MaxScreenshotBytes int
	MaxFullPageHeight  int
	// ViewportWidth and ViewportHeight are the page's viewport in CSS
	// pixels (device scale factor 1); default 1280x800.
	ViewportWidth, ViewportHeight int

	// MaxBrowsers caps the external Chromium processes alive at once
	// (one per session); a session that would exceed it gets
	// pool_exhausted. Default 8.
	MaxBrowsers int
	// DataDir holds the external browsers' user data directories (and,
	// when its path is short enough for Unix sockets, their TMPDIRs), one
	// fresh directory per browser start, removed when it stops; what a
	// killed gateway left there is removed by New. Use a directory of the
	// gateway's own, such as <data-dir>/browser. Default
	// $TMPDIR/sandgate-browser.
	DataDir string
}

func (c *Config) applyDefaults() {
	if c.ChromiumPath == "" {
		c.ChromiumPath = DefaultChromiumPath
		if _, err := os.Stat(c.ChromiumPath); err != nil {
			if p, err := exec.LookPath("chromium"); err == nil {
				c.ChromiumPath = p
			}
		}
	}
	if c.Mode == "" {
		c.Mode = "STRICT"
	}
	setDur(&c.IdleTTL, DefaultIdleTTL)
	setDur(&c.ActionTimeout, DefaultActionTimeout)
	setDur(&c.MaxActionTimeout, DefaultMaxActionTimeout)
	setDur(&c.StartTimeout, DefaultStartTimeout)
	setDur(&c.DecisionTimeout, DefaultDecisionTimeout)
	setInt(&c.MaxContentBytes, DefaultMaxContentBytes)
	setInt(&c.MaxScreenshotBytes, DefaultMaxScreenshotBytes)
	setInt(&c.MaxFullPageHeight, DefaultMaxFullPageHeight)
	setInt(&c.ViewportWidth, DefaultViewportWidth)
	setInt(&c.ViewportHeight, DefaultViewportHeight)
	setInt(&c.MaxBrowsers, DefaultMaxBrowsers)
	if c.DataDir == "" {
		c.DataDir = filepath.Join(os.TempDir(), "sandgate-browser")
	}
	if c.ActionTimeout > c.MaxActionTimeout {
		c.ActionTimeout = c.MaxActionTimeout
	}
}

func setDur(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

func setInt(n *int, def int) {
	if *n <= 0 {
		*n = def
	}
}

// reservedFlags are the command-line switches the router sets itself and
// ExtraFlags may not touch: the proxy and resolver settings carry the SSRF
// design, the rest keep the browser headless, private and reachable only
// through its pipe.
var reservedFlags = map[string]bool{
	"proxy-server": true, "proxy-bypass-list": true, "proxy-pac-url": true, "proxy-auto-detect": true,
	"no-proxy-server": true, "host-resolver-rules": true, "host-rules": true,
	"force-webrtc-ip-handling-policy": true, "webrtc-ip-handling-policy": true,
	"headless": true, "remote-debugging-port": true, "remote-debugging-address": true,
	"remote-debugging-pipe": true, "remote-allow-origins": true, "user-data-dir": true,
	"disable-web-security": true, "allow-file-access-from-files": true, "allow-running-insecure-content": true,
	"ignore-certificate-errors": true, "load-extension": true, "disable-extensions": true,
	"enable-features": true, "disable-features": true, "disable-quic": true,
}

// Validate reports every problem of the configuration at once. It is
// called by New after defaults are applied.
func (c Config) Validate() error {
	var errs []error
	if c.MaxActionTimeout > 30*time.Minute {
		errs = append(errs, fmt.Errorf("browser: max action timeout %s is over 30m", c.MaxActionTimeout))
	}
	if c.MaxContentBytes > 64<<20 {
		errs = append(errs, fmt.Errorf("browser: max content bytes %d is over 64 MiB", c.MaxContentBytes))
	}
	if c.MaxScreenshotBytes > 256<<20 {
		errs = append(errs, fmt.Errorf("browser: max screenshot bytes %d is over 256 MiB", c.MaxScreenshotBytes))
	}
	if c.ViewportWidth > 8192 || c.ViewportHeight > 8192 {
		errs = append(errs, fmt.Errorf("browser: viewport %dx%d is over 8192x8192", c.ViewportWidth, c.ViewportHeight))
	}
	if c.Mode != "STRICT" && c.Mode != "PERMISSIVE" {
		errs = append(errs, fmt.Errorf("browser: mode %q is not STRICT or PERMISSIVE", c.Mode))
	}
	if !filepath.IsAbs(c.DataDir) {
		errs = append(errs, fmt.Errorf("browser: data dir %q is not absolute", c.DataDir))
	}
	for _, f := range c.ExtraFlags {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		switch {
		case !strings.HasPrefix(f, "--") || name == "":
			errs = append(errs, fmt.Errorf("browser: extra flag %q is not --name or --name=value", f))
		case reservedFlags[name]:
			errs = append(errs, fmt.Errorf("browser: extra flag --%s is set by the router and cannot be changed", name))
		}
	}
	for _, h := range c.AllowHosts {
		if err := validAllowHost(h); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func validAllowHost(h string) error {
	host := h
	if hh, port, err := net.SplitHostPort(h); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("browser: allow host %q has a bad port", h)
		}
		host = hh
	}
	if host == "" || strings.ContainsAny(host, "/ *?@") {
		return fmt.Errorf("browser: allow host %q is not a host or host:port", h)
	}
	return nil
}
