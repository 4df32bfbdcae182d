package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch timings. Editors save by writing a temp file and renaming it, which
// arrives as a burst of events: the debounce folds the burst into one
// reload. fsnotify does not fire on network file systems, so a periodic
// content-hash poll backs it up.
const (
	watchDebounce = 200 * time.Millisecond
	DefaultPoll   = 5 * time.Second
)

// Watch reloads the policy when the files under Options.Dir change, until ctx
// is done. It watches directories, not files (an editor's rename replaces
// the file), and adds directories created later. With the embedded policy
// there is nothing to watch and Watch returns at once.
func (e *Engine) Watch(ctx context.Context, poll time.Duration) error {
	if e.dir == "" {
		return nil
	}
	if poll <= 0 {
		poll = DefaultPoll
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("policy watch: %w", err)
	}
	defer w.Close()
	if err := addTree(w, e.dir); err != nil {
		return fmt.Errorf("policy watch: %w", err)
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Create) {
				_ = addTree(w, ev.Name) // a new subdirectory; plain files fail harmlessly
			}
			debounce.Reset(watchDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			e.log.Warn("policy watch error; polling continues", "err", err)
		case <-debounce.C:
			e.reloadIfChanged(ctx)
		case <-ticker.C:
			e.reloadIfChanged(ctx)
		}
	}
}

func addTree(w *fsnotify.Watcher, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return w.Add(p)
		}
		return nil
	})
}

// reloadIfChanged reloads only when the content hash differs from both the
// revision in force and the last revision that failed, so a broken edit is
// reported once, not on every poll.
func (e *Engine) reloadIfChanged(ctx context.Context) {
	files, err := readTree(e.fsys, false)
	if err != nil {
		return // mid-rename; the next event or poll sees the settled tree
	}
	rev := revisionOf(files)
	e.mu.Lock()
	defer e.mu.Unlock()
	if rev == e.revisionLocked() || rev == e.lastFailRev {
		return
	}
	if _, err := e.reloadLocked(ctx); err != nil {
		e.lastFailRev = rev
	}
}
