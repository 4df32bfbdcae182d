package workspace

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
	"sync"
	"time"
)

// usageCache holds the measured size of each workspace. A measure is a walk
// of the whole tree, so it is reused for Options.UsageMaxAge, with the
// API's own writes added in between. The zero value is ready to use.
type usageCache struct {
	mu sync.Mutex
	m  map[string]*usage
}

type usage struct {
	mu       sync.Mutex // held across a measure and a check
	bytes    int64
	files    int64
	measured time.Time // zero: measure before the next check
}

func (c *usageCache) get(id string) *usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*usage)
	}
	u, ok := c.m[id]
	if !ok {
		u = &usage{}
		c.m[id] = u
	}
	return u
}

func (c *usageCache) forget(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}

// invalidate makes the next check measure again (after a delete, whose
// effect on the count of a removed tree is not known).
func (c *usageCache) invalidate(id string) {
	u := c.get(id)
	u.mu.Lock()
	u.measured = time.Time{}
	u.mu.Unlock()
}

// reserve checks that growing the session's workspace by dBytes and dFiles
// keeps it within quota, and counts the growth. A write that does not grow
// the workspace is always allowed, even over quota, so a session can get
// back under it. The caller gives the growth back with release when the
// write fails.
//
// inflight is how many of the entries already on disk belong to the write
// being checked (the directories it made): a measure taken now counts
// them, and the growth counts them again.
func (w *Workspaces) reserve(ctx context.Context, s *session, dBytes, dFiles, inflight int64) error {
	u := w.usage.get(s.id)
	u.mu.Lock()
	defer u.mu.Unlock()
	if dBytes <= 0 && dFiles <= 0 {
		u.bytes += dBytes
		u.files += dFiles
		return w.reserveTenant(ctx, s.id, dBytes) // a shrink: never refused
	}
	if u.measured.IsZero() || time.Since(u.measured) > w.opts.UsageMaxAge {
		b, f, err := measure(ctx, s.root, w.opts.QuotaFiles+1)
		if err != nil {
			return err
		}
		u.bytes, u.files, u.measured = b, f-inflight, time.Now()
	}
	if (dBytes > 0 && u.bytes+dBytes > w.opts.QuotaBytes) || (dFiles > 0 && u.files+dFiles > w.opts.QuotaFiles) {
		return fmt.Errorf("%w: %d bytes in %d entries, growing by %d bytes and %d entries",
			ErrQuotaExceeded, u.bytes, u.files, dBytes, dFiles)
	}
	if err := w.reserveTenant(ctx, s.id, dBytes); err != nil {
		return err
	}
	u.bytes += dBytes
	u.files += dFiles
	return nil
}

func (w *Workspaces) release(id string, dBytes, dFiles int64) {
	u := w.usage.get(id)
	u.mu.Lock()
	u.bytes -= dBytes
	u.files -= dFiles
	u.mu.Unlock()
	w.releaseTenant(id, dBytes)
}

// measure sums the sizes of the regular files under root and counts its
// entries (files, directories, links...), stopping once maxFiles entries
// were seen: by then the quota is exceeded whatever the rest holds.
// Symlinks are counted, never followed. The temp files of writes in
// flight are not counted: their writes reserve what they will add.
func measure(ctx context.Context, root *os.Root, maxFiles int64) (bytes, files int64, err error) {
	top, err := subRoot(root, ".")
	if err != nil {
		return 0, 0, fmt.Errorf("measure workspace: %w", err)
	}
	defer top.Close()
	wk := walker{ctx: ctx, budget: math.MaxInt}
	err = walkTree(&wk, top, ".", 0, struct{}{}, func(_ *os.Root, _ string, e fs.DirEntry, _ struct{}) (struct{}, bool, bool) {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			return struct{}{}, false, false
		}
		files++
		if e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				bytes += fi.Size()
			}
		}
		return struct{}{}, true, files >= maxFiles
	})
	return bytes, files, err
}
