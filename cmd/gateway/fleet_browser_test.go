package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// approvePage opens base's approval page in Debian's Chromium (driven by
// chromedp, as api's browser tests do), waits for the card of approval id
// and clicks Approve with reason. Under plain go test it skips without
// Chromium; SANDGATE_REQUIRE_BROWSER=1 (make test) makes that a failure.
func approvePage(t *testing.T, base, approverToken, id, reason string) {
	t.Helper()
	path := ""
	for _, p := range []string{os.Getenv("SANDGATE_CHROMIUM"), "/usr/bin/chromium", "chromium"} {
		if p == "" {
			continue
		}
		if found, err := exec.LookPath(p); err == nil {
			path = found
			break
		}
	}
	if path == "" {
		if os.Getenv("SANDGATE_REQUIRE_BROWSER") == "1" {
			t.Fatal("chromium not found and SANDGATE_REQUIRE_BROWSER=1")
		}
		t.Skip("chromium not found; set SANDGATE_REQUIRE_BROWSER=1 to make this a failure")
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(path), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()), chromedp.Env("TMPDIR="+t.TempDir()), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-extensions", true))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer func() {
		cctx, ccancel := context.WithTimeout(bctx, 15*time.Second)
		_ = chromedp.Cancel(cctx)
		ccancel()
		bcancel()
	}()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	card := func(inner string) chromedp.CSS { return chromedp.CSS(fmt.Sprintf(`.card[data-id=%q] %s`, id, inner)) }
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/?token="+approverToken),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(card(".approve")),
		chromedp.SendKeys(card(".reason-input"), reason),
		chromedp.Click(card(".approve")),
		chromedp.WaitVisible(card(`.banner[data-status="approved"]`)),
	); err != nil {
		t.Fatalf("approve %s on the page at %s: %v", id, base, err)
	}
}
