package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/inspector"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"github.com/sandgate/sandgate/internal/procfs"
	"github.com/sandgate/sandgate/policy"
)

// Backends.
const (
	BackendExternal = "external" // headless Chromium on the gateway host
	BackendAIO      = "aio"      // the browser inside the session's AIO sandbox
)

// cdpCallTimeout bounds one housekeeping CDP command (answering a paused
// request, enabling a domain).
const cdpCallTimeout = 10 * time.Second

// closeTimeout bounds a graceful browser close before the process group is
// killed.
const closeTimeout = 5 * time.Second

// tmpPrefix names the browsers' TMPDIRs; "~" is never in a session id, so
// they cannot be mistaken for a session's user data directory.
const tmpPrefix = "~tmp-"

// maxInflightPauses bounds the paused requests decided concurrently.
const maxInflightPauses = 32

// instance is one live browser of one session: the chromedp contexts, the
// interception loop, and for the external backend the Chromium process and
// its egress proxy.
type instance struct {
	backend   string
	sessionID string
	log       *slog.Logger
	guard     *guard
	rec       *recorder
	proxy     *egressProxy // external only

	allocCancel   context.CancelFunc
	browserCtx    context.Context
	browserCancel context.CancelFunc
	tabCtx        context.Context // the page actions run in
	tabCancel     context.CancelFunc
	mainFrame     string // the tab's target id, which is its main frame id

	pid         int    // external: the browser process, leader of its own process group
	userDataDir string // external: removed on close
	tmpDir      string // external: Chromium's TMPDIR, short (its sockets live there), removed on close

	crashed   atomic.Bool // the renderer crashed or the tab went away
	closeOnce sync.Once

	loopsMu  sync.Mutex
	stopping bool           // set by close: no new event handler starts
	loops    sync.WaitGroup // event handlers in flight
}

// spawn runs an event handler, unless the instance is closing.
func (in *instance) spawn(fn func()) {
	in.loopsMu.Lock()
	defer in.loopsMu.Unlock()
	if in.stopping {
		return
	}
	in.loops.Go(fn)
}

// alive reports whether the browser can take another action, as far as
// the events seen so far tell.
func (in *instance) alive() bool {
	return in.browserCtx.Err() == nil && in.tabCtx.Err() == nil && !in.crashed.Load()
}

// responsive tells a browser that died a moment ago (its exit not yet
// noticed by chromedp) from a live one, so that the router starts a new
// browser before the action instead of failing the action. For the
// external backend it looks at the process itself (gone, or a zombie);
// a remote (aio) browser's lost connection ends its context at once.
func (in *instance) responsive() bool {
	if !in.alive() {
		return false
	}
	if in.pid <= 0 {
		return true
	}
	s, err := procfs.ReadStat(in.pid)
	return err == nil && !s.Gone()
}

// startExternal launches a headless Chromium for the session, pinned to a
// fresh egress proxy, and opens its tab in a browser context of its own.
func (m *Manager) startExternal(ctx context.Context, sessionID string, rec *recorder) (_ *instance, err error) {
	in := &instance{backend: BackendExternal, sessionID: sessionID, log: m.log, rec: rec}
	in.guard = newGuard(&m.cfg, m.deps.Policy, m.resolver, rec, sessionID, BackendExternal)
	defer func() {
		if err != nil {
			in.close()
		}
	}()
	if err := os.MkdirAll(m.cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("browser data dir: %w", err)
	}
	if in.userDataDir, err = os.MkdirTemp(m.cfg.DataDir, sessionID+"-"); err != nil {
		return nil, fmt.Errorf("browser user data dir: %w", err)
	}
	// Chromium puts Unix sockets in TMPDIR, whose paths may not exceed 107
	// bytes: a short directory of its own, not one below the (session-
	// named) user data directory.
	tmpParent := m.cfg.DataDir
	if len(tmpParent)+len("/"+tmpPrefix+"1234567890/org.chromium.Chromium.abcdef/SingletonSocket") > 107 {
		tmpParent = os.TempDir()
	}
	if in.tmpDir, err = os.MkdirTemp(tmpParent, tmpPrefix); err != nil {
		return nil, fmt.Errorf("browser temp dir: %w", err)
	}
	if in.proxy, err = newEgressProxy(in.guard, m.log); err != nil {
		return nil, fmt.Errorf("browser proxy: %w", err)
	}
	opts := m.execOptions(in.userDataDir, in.tmpDir, in.proxy.addr())
	allocCtx, allocCancel := chromedp.NewExecAllocator(m.lifetime, opts...)
	in.allocCancel = allocCancel
	in.browserCtx, in.browserCancel = chromedp.NewContext(allocCtx)
	if err := m.startBrowser(ctx, in.browserCtx); err != nil {
		return nil, err
	}
	if p := chromedp.FromContext(in.browserCtx).Browser.Process(); p != nil {
		in.pid = p.Pid
	}
	if err := in.interceptRequests(ctx, true); err != nil {
		return nil, err
	}
	// The tab lives in a browser context of its own (an incognito-like
	// profile): its cookies, storage and HTTP auth cache are not those of
	// the default profile, where Chromium's background services run, so the
	// proxy credentials it learns are never used by them.
	in.tabCtx, in.tabCancel = chromedp.NewContext(in.browserCtx, chromedp.WithNewBrowserContext())
	if err := in.openTab(ctx, m); err != nil {
		return nil, err
	}
	return in, nil
}

// startAIO attaches to the browser inside the session's sandbox and opens a
// tab of its own in it. The sandbox's browser keeps its default profile:
// the aio backend exists for work that shares state with the sandbox.
func (m *Manager) startAIO(ctx context.Context, sessionID string, rec *recorder) (_ *instance, err error) {
	if m.deps.AIO == nil {
		return nil, fmt.Errorf("%w: no AIO sandbox backend is configured", ErrUnavailable)
	}
	url, err := m.deps.AIO.BrowserCDP(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	in := &instance{backend: BackendAIO, sessionID: sessionID, log: m.log, rec: rec}
	in.guard = newGuard(&m.cfg, m.deps.Policy, m.resolver, rec, sessionID, BackendAIO)
	defer func() {
		if err != nil {
			in.close()
		}
	}()
	// A ws:// URL is the browser's own DevTools socket (the AIO executor's
	// forwarder path carries a token before /devtools/): use it as given;
	// an http:// address is asked for it at /json/version.
	aopts := []remote.Option{remote.WithDialTimeout(m.cfg.StartTimeout)}
	if strings.HasPrefix(url, "ws://") || strings.HasPrefix(url, "wss://") {
		aopts = append(aopts, remote.NoModifyURL)
	}
	allocCtx, allocCancel := remote.NewAllocator(m.lifetime, url, aopts...)
	in.allocCancel = allocCancel
	// Attaching creates our own tab, so browserCtx is also the tab.
	in.browserCtx, in.browserCancel = chromedp.NewContext(allocCtx)
	in.tabCtx, in.tabCancel = in.browserCtx, in.browserCancel
	if err := m.startBrowser(ctx, in.browserCtx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := in.interceptRequests(ctx, false); err != nil {
		return nil, err
	}
	if err := in.openTab(ctx, m); err != nil {
		return nil, err
	}
	return in, nil
}

// startBrowser runs the first chromedp command on bctx, which starts (or
// attaches to) the browser.
func (m *Manager) startBrowser(ctx context.Context, bctx context.Context) error {
	if err := m.firstRun(ctx, bctx); err != nil {
		return fmt.Errorf("start browser: %w", err)
	}
	return nil
}

// firstRun runs the first chromedp command on a chromedp context, with the
// start timeout and the caller's cancellation applied from outside: the
// first Run binds the browser's (or the tab's) event loop to the context it
// is given, so it must get the long-lived context itself, never one with a
// deadline. On failure the caller closes the instance, which ends the run.
func (m *Manager) firstRun(ctx context.Context, cctx context.Context, steps ...chromedp.Action[chromedp.Void]) error {
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(cctx, steps...) }()
	timer := time.NewTimer(m.cfg.StartTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("%w: the browser did not start within %s", ErrUnavailable, m.cfg.StartTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openTab creates the tab, sets its viewport, and watches it for crashes.
func (in *instance) openTab(ctx context.Context, m *Manager) error {
	if err := m.firstRun(ctx, in.tabCtx, chromedp.EmulateViewport(int64(m.cfg.ViewportWidth), int64(m.cfg.ViewportHeight))); err != nil {
		return fmt.Errorf("open tab: %w", err)
	}
	c := chromedp.FromContext(in.tabCtx)
	in.mainFrame = string(c.Target.TargetID)
	if err := chromedp.Listen(in.tabCtx, func(ev any) {
		switch ev.(type) {
		case *inspector.EventTargetCrashed, *inspector.EventDetached:
			in.crashed.Store(true)
		}
	}); err != nil {
		return fmt.Errorf("watch tab: %w", err)
	}
	return nil
}

// interceptRequests enables Fetch interception on the browser target, so
// that every request of every tab, frame (including out-of-process
// iframes) and worker is paused until the policy has decided it. With
// proxyAuth the proxy's credential challenges are answered too.
func (in *instance) interceptRequests(ctx context.Context, proxyAuth bool) error {
	// The listener runs in chromedp's read loop and must not block (the
	// answers to our own Fetch commands come through that loop): each
	// event gets a goroutine, and at most maxInflightPauses of them decide
	// at once.
	sem := make(chan struct{}, maxInflightPauses)
	err := chromedp.ListenBrowser(in.browserCtx, func(ev any) {
		switch ev := ev.(type) {
		case *fetch.EventRequestPaused:
			in.spawn(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				in.onPaused(*ev)
			})
		case *fetch.EventAuthRequired:
			in.spawn(func() { in.onAuth(*ev) })
		}
	})
	if err != nil {
		return fmt.Errorf("listen for paused requests: %w", err)
	}
	cctx, cancel := context.WithTimeout(in.browserCtx, cdpCallTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	_, err = chromedp.CallBrowser(cctx, fetch.Enable, fetch.EnableParams{
		Patterns:           []*fetch.RequestPattern{{URLPattern: "*", RequestStage: fetch.RequestStageRequest}},
		HandleAuthRequests: &proxyAuth,
	})
	if err != nil {
		return fmt.Errorf("enable request interception: %w", err)
	}
	return nil
}

// onPaused decides one paused request and lets it go on or fails it.
func (in *instance) onPaused(ev fetch.EventRequestPaused) {
	ctx := in.browserCtx
	t := target{raw: "", frameID: string(ev.FrameID), resourceType: string(ev.ResourceType),
		navigation: ev.ResourceType == network.ResourceTypeDocument}
	var v verdict
	if ev.Request != nil {
		t2, ok := targetOf(ev.Request.URL)
		t2.method, t2.frameID, t2.resourceType, t2.navigation = ev.Request.Method, t.frameID, t.resourceType, t.navigation
		t = t2
		if ok {
			v = in.guard.decide(ctx, t, layerFetch)
		}
	}
	if v.decision.Action == "" { // no request or an unparseable URL
		v.decision = policy.BrowserDecision{Action: policy.ActionDeny,
			Reasons: []policy.Reason{{Code: "browser.url", Message: "the request URL could not be parsed"}}}
		in.guard.record(t, layerFetch, v)
	}
	cctx, cancel := context.WithTimeout(ctx, cdpCallTimeout)
	defer cancel()
	var err error
	if v.decision.Allowed() {
		_, err = chromedp.CallBrowser(cctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
	} else {
		_, err = chromedp.CallBrowser(cctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
	}
	if err != nil && ctx.Err() == nil {
		in.log.Debug("browser: answering a paused request failed", "session_id", in.sessionID, "err", err)
	}
}

// onAuth answers the egress proxy's challenge with its secret, and only
// that one: a site's own HTTP authentication is cancelled (the agent has no
// credentials to give, and the gateway must not guess).
func (in *instance) onAuth(ev fetch.EventAuthRequired) {
	resp := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
	if c := ev.AuthChallenge; c != nil && c.Source == fetch.AuthChallengeSourceProxy && in.proxy != nil &&
		c.Origin == "http://"+in.proxy.addr() {
		resp = &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials,
			Username: proxyUser, Password: in.proxy.pass}
	}
	cctx, cancel := context.WithTimeout(in.browserCtx, cdpCallTimeout)
	defer cancel()
	_, _ = chromedp.CallBrowser(cctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID, AuthChallengeResponse: resp})
}

// close ends the instance: the tab, the browser (external: the whole
// process group, and any process still using its user data directory),
// the proxy, and the interception loops. It waits for the decision records
// to be written. Safe to call more than once.
func (in *instance) close() {
	in.closeOnce.Do(func() {
		if in.browserCtx != nil {
			if in.backend == BackendExternal && in.browserCtx.Err() == nil {
				// Ask Chromium to shut down cleanly first: it then
				// reaps its own children.
				cctx, cancel := context.WithTimeout(in.browserCtx, closeTimeout)
				_ = chromedp.Cancel(cctx)
				cancel()
			}
			if in.tabCancel != nil {
				in.tabCancel() // aio: closes our tab in the sandbox's browser
			}
			in.browserCancel()
		}
		if in.allocCancel != nil {
			in.allocCancel() // waits for the process to exit (external)
		}
		if in.pid > 0 {
			killGroup(in.pid)
		}
		if in.userDataDir != "" {
			killUsing(in.userDataDir)
			_ = removeAllRetry(in.userDataDir)
		}
		if in.tmpDir != "" {
			_ = removeAllRetry(in.tmpDir)
		}
		if in.proxy != nil {
			in.proxy.close()
		}
		in.loopsMu.Lock()
		in.stopping = true
		in.loopsMu.Unlock()
		in.loops.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
		in.rec.drain(ctx)
		cancel()
	})
}

// execOptions is the external Chromium's command line and environment.
func (m *Manager) execOptions(userDataDir, tmpDir, proxyAddr string) []chromedp.ExecAllocatorOption {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(m.cfg.ChromiumPath),
		// The gateway's environment holds its tokens: Chromium gets a
		// small fixed environment instead.
		chromedp.NoInheritEnv,
		chromedp.Env("HOME="+userDataDir, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
			"TMPDIR="+tmpDir, "XDG_CONFIG_HOME="+filepath.Join(userDataDir, ".config"),
			"XDG_CACHE_HOME="+filepath.Join(userDataDir, ".cache")),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			// Its own process group, killed whole on close; and killed by
			// the kernel if the gateway dies (chromedp starts it from a
			// goroutine locked to its thread, as Pdeathsig needs).
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		}),
		chromedp.UserDataDir(userDataDir),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.DisableGPU,
		chromedp.WindowSize(m.cfg.ViewportWidth, m.cfg.ViewportHeight),
		// Network: everything through the egress proxy, loopback included;
		// Chromium itself resolves no name (a connection that somehow
		// skipped the proxy would find no address); WebRTC may not send UDP
		// around the proxy; no QUIC.
		chromedp.ProxyServer("http://" + proxyAddr),
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"),
		chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("disable-quic", true),
		// No background traffic of Chromium's own.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-client-side-phishing-detection", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("safebrowsing-disable-auto-update", true),
		// BackForwardCache is off so that back loads its page again,
		// through the policy, like any navigation.
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,"+
			"NetworkTimeServiceQuerying,CertificateTransparencyComponentUpdater,AutofillServerCommunication,"+
			"InterestFeedContentSuggestions,PrivacySandboxSettings4,BackForwardCache"),
		// Steady, unthrottled pages for automation.
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-hang-monitor", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("force-color-profile", "srgb"),
	}
	for _, f := range m.cfg.ExtraFlags {
		name, value, hasValue := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if hasValue {
			opts = append(opts, chromedp.Flag(name, value))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	return opts
}

// killGroup kills the process group led by pid. A group that is already
// gone is not an error.
func killGroup(pid int) {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return
	}
}

// killUsing kills every process whose command line names dir as its user
// data directory: Chromium passes it to each child, so this finds children
// that left the process group too. It repeats until a few passes find
// nothing, since a dying parent can fork once more.
func killUsing(dir string) {
	deadline := time.Now().Add(2 * time.Second)
	for quiet := 0; quiet < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if pids := processesUsing(dir); len(pids) > 0 {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			quiet = 0
		} else {
			quiet++
		}
	}
}

// processesUsing lists the processes whose command line mentions dir.
// Chromium names its user data directory in every child's arguments
// (--user-data-dir=, or --database= below it for the crashpad handler, which
// daemonises out of the process group), and zygote children rewrite their
// argv into one string, so the match is on the text, not on one argument.
// The directory's name is random, so nothing else matches it.
func processesUsing(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if strings.Contains(string(b), dir) {
			out = append(out, pid)
		}
	}
	return out
}

// removeAllRetry removes dir, retrying for a moment: a Chromium child can
// still write into it as it dies.
func removeAllRetry(dir string) error {
	var err error
	for range 50 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// reapStale removes what browsers of an earlier gateway left in dataDir
// (a gateway that was killed cannot clean up; its browsers died with it).
// An entry that a running process still names is left alone: another
// gateway may share the directory.
func reapStale(dataDir string) {
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dataDir, e.Name())
		if len(processesUsing(p)) == 0 {
			_ = os.RemoveAll(p)
		}
	}
}
