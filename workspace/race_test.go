package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRaceSymlinkFlip plays the hostile code of a session: in a loop it
// renames a directory away and puts a symlink pointing outside (to a
// canary directory, another session's workspace, /proc/self, /etc) in its
// place, then puts it back, while the file API reads, writes, edits,
// lists, greps and deletes under that directory as fast as it can. Nothing
// outside the workspace may ever be returned or changed.
func TestRaceSymlinkFlip(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := context.Background()
	const inside = "sg-inside-content"
	write(t, f.w, "d/in.txt", inside)
	write(t, f.w, "d/e.txt", "counter 0")
	d, dreal := filepath.Join(f.ws, "d"), filepath.Join(f.ws, "d.real")
	targets := []string{f.out, f.other, "/proc/self", "/etc", "../../outside", "../" + otherSess}

	duration := 2 * time.Second
	if testing.Short() {
		duration = 300 * time.Millisecond
	}
	stop := make(chan struct{})
	var flips atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.Rename(d, dreal)
			_ = os.Symlink(targets[i%len(targets)], d)
			hold(time.Duration(i%5) * 50 * time.Microsecond)
			if fi, err := os.Lstat(d); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				_ = os.Remove(d)
			} else if _, err := os.Lstat(dreal); err == nil {
				_ = os.RemoveAll(d) // a directory the API made while d was away
			}
			_ = os.Rename(dreal, d)
			flips.Add(1)
			hold(time.Duration(i%7) * 50 * time.Microsecond)
		}
	})

	var ok, refused atomic.Int64
	var errMu sync.Mutex
	errCodes := map[string]int{}
	leaked := func(s string) bool {
		return strings.Contains(s, canaryText) || strings.Contains(s, otherSecret) || strings.Contains(s, "root:")
	}
	deadline := time.Now().Add(duration)
	for w := range 2 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				count := func(err error) {
					if err == nil {
						ok.Add(1)
					} else {
						refused.Add(1)
						errMu.Lock()
						errCodes[string(codeOf(err))]++
						errMu.Unlock()
						if codeOf(err) == "internal" {
							t.Errorf("internal error under the race: %v", err)
						}
					}
				}
				page, err := f.w.ReadText(ctx, sess, "d/in.txt", 0, 0)
				count(err)
				if leaked(page.Content) || (err == nil && !strings.Contains(page.Content, inside)) {
					t.Errorf("read returned %q", page.Content)
				}
				for _, p := range []string{"d/canary.txt", "d/secret.txt", "d/passwd", "d/environ"} {
					if page, err := f.w.ReadText(ctx, sess, p, 0, 0); err == nil && leaked(page.Content) {
						t.Errorf("read %s returned %q", p, page.Content)
					}
				}
				if raw, err := f.w.OpenRaw(ctx, sess, "d/in.txt"); err == nil {
					if where := fdPath(raw.File); !strings.HasPrefix(where, f.ws+"/") {
						t.Errorf("raw open reached %s", where)
					}
					raw.Close()
				}
				_, err = f.w.Write(ctx, sess, fmt.Sprintf("d/new-%d-%d.txt", w, i), WriteCreate, strings.NewReader(probeContent))
				count(err)
				_, err = f.w.Write(ctx, sess, "d/canary.txt", WriteOverwrite, strings.NewReader(probeContent))
				count(err)
				_, err = f.w.Edit(ctx, sess, "d/e.txt", "counter", "counter", false)
				count(err)
				l, err := f.w.ListFiles(ctx, sess, "d", 2)
				count(err)
				for _, e := range l.Entries {
					if strings.HasSuffix(e.Path, "/secret.txt") || strings.HasSuffix(e.Path, "/passwd") || strings.HasSuffix(e.Path, "/environ") {
						t.Errorf("list showed %s", e.Path)
					}
				}
				g, err := f.w.Grep(ctx, sess, GrepQuery{Pattern: "sg-", Path: "d", Literal: true})
				count(err)
				for _, m := range g.Matches {
					if leaked(m.Text) {
						t.Errorf("grep returned %q", m.Text)
					}
				}
				_, err = f.w.Delete(ctx, sess, fmt.Sprintf("d/new-%d-%d.txt", w, i), false)
				count(err)
			}
		})
	}
	time.Sleep(time.Until(deadline))
	close(stop)
	wg.Wait()
	t.Logf("%d flips, %d operations succeeded, %d refused: %v", flips.Load(), ok.Load(), refused.Load(), errCodes)
	if flips.Load() < 100 || ok.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("the race did not happen: %d flips, %d ok, %d refused", flips.Load(), ok.Load(), refused.Load())
	}
	f.checkOutside()
	if got := names(t, f.other); strings.Join(got, ",") != "secret.txt" {
		t.Fatalf("the other session's workspace changed: %v", got)
	}
}

// TestCrossSessionIsolation: session s cannot read, list, search, write,
// edit or delete session other's files by any spelling.
func TestCrossSessionIsolation(t *testing.T) {
	f := newFixture(t, Options{})
	f.plant()
	ctx := context.Background()
	for _, p := range []string{
		"../other/secret.txt", "/workspace/../other/secret.txt", f.other + "/secret.txt", "other/secret.txt",
		"rel_other/secret.txt", "up/other/secret.txt", "..", "../other", "/workspace/../other", f.other,
		"other", "rel_other", "./../other/./secret.txt", "sub/../../other/secret.txt",
	} {
		t.Run(fmt.Sprintf("%.40q", p), func(t *testing.T) {
			denied := func(op string, err error) {
				t.Helper()
				if err == nil || !(isTraversal(err) || errors.Is(err, ErrFileNotFound)) {
					t.Errorf("%s %q: %v", op, p, err)
				}
			}
			page, err := f.w.ReadText(ctx, sess, p, 0, 0)
			denied("read", err)
			if strings.Contains(page.Content, otherSecret) {
				t.Fatal("read the other session's secret")
			}
			_, err = f.w.OpenRaw(ctx, sess, p)
			denied("raw", err)
			_, err = f.w.ListFiles(ctx, sess, p, 3)
			denied("list", err)
			_, err = f.w.Glob(ctx, sess, p, "**")
			denied("glob", err)
			_, err = f.w.Grep(ctx, sess, GrepQuery{Pattern: "sg-", Path: p, Literal: true})
			denied("grep", err)
			_, err = f.w.Write(ctx, sess, p+"/pwned.txt", WriteOverwrite, strings.NewReader("pwned"))
			denied("write", err)
			_, err = f.w.Edit(ctx, sess, p, "sg", "pwned", true)
			denied("edit", err)
			if !strings.HasSuffix(p, "other") && !strings.HasSuffix(p, "rel_other") { // deleting the link itself is fine
				_, err = f.w.Delete(ctx, sess, p, true)
				denied("delete", err)
			}
		})
	}
	// Whole-workspace searches from s never show other's files.
	l, err := f.w.Glob(ctx, sess, "", "**")
	must(t, err)
	g, err := f.w.Grep(ctx, sess, GrepQuery{Pattern: "sg-secret", Literal: true})
	must(t, err)
	if strings.Contains(paths(l.Entries), "secret.txt") || len(g.Matches) != 0 {
		t.Fatalf("searches reached the other session: %s %v", paths(l.Entries), g.Matches)
	}
	for _, id := range []string{"../other", "other/..", "s/../other", ".", ""} {
		if _, err := f.w.ReadText(ctx, id, "secret.txt", 0, 0); !errors.Is(err, ErrInvalidSessionID) {
			t.Errorf("session id %q: %v", id, err)
		}
	}
	f.checkOutside()
	if got := names(t, f.other); strings.Join(got, ",") != "secret.txt" {
		t.Fatalf("the other session's workspace changed: %v", got)
	}
}

// hold keeps the current state for about d, yielding meanwhile.
func hold(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
		runtime.Gosched()
	}
}
