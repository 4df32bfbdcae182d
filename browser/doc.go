// Package browser is sandgate's single-instance browser router (DESIGN.md
// §5 "Browser"): at most one live browser per session, either a headless
// Chromium on the gateway host (external) or the browser inside the
// session's AIO sandbox (aio), both driven over CDP with chromedp, with
// every request the page makes decided by the sandgate.browser policy.
//
// # Routing and lifecycle
//
// A [Manager] holds one [Router] per session. The request's context picks
// the backend: needs_file_access or is_research select aio, anything else
// external. A Router holds at most one instance; an action for the other
// backend closes the current one first, so a session never has two.
// Actions of one session are serialised by the Router's lock; sessions run
// in parallel. A browser whose process died, whose tab crashed or whose
// CDP connection dropped is noticed before the next action (events, and
// the process state in /proc) and replaced; one idle for Config.IdleTTL is
// closed by a janitor; ReleaseSession (DELETE /v1/sessions/{id}) and Close
// (shutdown) end them.
//
// The external backend runs one Chromium process per session, not one
// shared process with a browser context per session: a crash, a hang or a
// memory blow-up stays in its session, the process tree can be killed
// whole, and the egress proxy (below) knows which session a connection
// belongs to. Its tab still lives in a browser context of its own, apart
// from the default profile in which Chromium's background services run.
// The process starts in its own process group with Pdeathsig (chromedp
// starts it from a goroutine locked to its OS thread, as Pdeathsig needs),
// gets a fixed environment (never the gateway's: it holds the tokens), a
// fresh user data directory and TMPDIR, and is killed with its group, and
// every process naming its user data directory (the crashpad handler
// daemonises out of the group), on close. When the gateway itself is
// killed, the browser dies by Pdeathsig and its children and crashpad
// handlers follow it (TestNoChromiumOutlivesTheGateway).
//
// The aio backend attaches to the sandbox browser's DevTools endpoint
// ([AIOBrowsers], GET /v1/browser/info of the sandbox) and opens a tab of
// its own; closing detaches and closes that tab. The sandbox's browser is
// part of the sandbox and lives as long as it does.
//
// # SSRF: what is decided, where, and on which address
//
// The policy (package sandgate.browser) decides each request on its
// scheme, host, port and, for the external backend, the addresses the
// gateway resolved for the host: loopback, private, link-local and
// metadata addresses are denied unless the host is allowlisted
// (Config.AllowHosts, or data). Three layers make sure every request is
// decided and that the address decided on is the address connected to:
//
//  1. The typed URL. navigate decides the agent's URL before the browser
//     sees it (before one is even started): javascript:, chrome:, data:
//     and file: navigations stop here; the Fetch domain would never pause
//     the first three.
//  2. CDP Fetch interception, enabled on the browser target, pauses every
//     request of every tab, frame (out-of-process iframes included) and
//     worker: documents, redirect hops (each hop is a new paused request),
//     sub-resources, fetch/XHR. Each is decided, then continued or failed
//     with BlockedByClient. This is the per-request decision and audit
//     record, with the full URL as policy input.
//  3. The egress proxy (external only). Chromium runs with --proxy-server
//     pointing at an HTTP proxy inside the gateway, one per browser, and
//     --proxy-bypass-list=<-loopback>, so loopback goes through it too.
//     The proxy answers CONNECT (https, wss, and ws, which Chromium also
//     tunnels) and absolute-form http requests. For each it takes the
//     addresses the Fetch layer decided on moments ago for that host and
//     port, or else resolves and decides itself, and dials exactly those
//     addresses: there is no second lookup between check and connect, so
//     DNS rebinding cannot pass (TestProxyDialsTheCheckedAddress). It also
//     catches what Fetch never sees: WebSocket handshakes.
//
// Chromium itself resolves no name (--host-resolver-rules maps everything
// to NOTFOUND except the proxy's 127.0.0.1), WebRTC may not send UDP
// around the proxy, and QUIC is off, so a connection that somehow skipped
// the proxy would find no address. The proxy wants credentials that only
// this browser's CDP session holds (a random secret, given in answer to
// Fetch.authRequired for the proxy's own origin only): nothing else on the
// host can use it as a way out, and Chromium's background services, which
// run in network contexts that never learn the secret, never leave the
// host. For the aio backend the sandbox's own network rules apply to
// connections (it has none by default); layers 1 and 2 still decide every
// request, with backend "aio" in the policy input.
//
// # Audit
//
// Every decision is a browser.request record (layer action, fetch or
// proxy; host, port, scheme, resource type, resolved addresses; never the
// path, query, cookies or page content), and every action a browser.action
// record (outcome, error code, host and scheme for navigations, the
// screenshot's workspace path and size). Denials and the action's record
// are durable before the response; allow records of page requests are
// batched and written in the background when the session is quiet (see
// recorder), so they cost an action no extra commit.
//
// # Actions
//
// navigate, click, type, wait_for, content, screenshot, scroll, back and
// close, each with strictly decoded parameters (invalid_request naming the
// field), a timeout (timeout_s, capped by Config.MaxActionTimeout) and a
// structured result. Screenshots are written into the session's workspace
// through the workspace file API (workspace.Workspaces.Write): the path
// rules of every file operation, owned by the session's uid, replaced
// atomically, and counted against the per-file limit and the session's
// quota like an agent's own write.
package browser
