// Package browser is sandgate's single-instance browser router (DESIGN.md
// §5 "Browser"): at most one live browser per session, either a headless
// Chromium on the gateway host (external) or the browser inside the
// session's AIO sandbox (aio), both driven over CDP with chromedp, with
// every request the page makes decided by the sandgate.browser policy.
package browser
