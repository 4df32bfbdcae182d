package events

import (
	"context"
	"time"
)

// Prune runs one pruning pass now.
func (l *Log) Prune(ctx context.Context) (int64, error) {
	return l.store.prune(ctx, time.Now().Add(-l.cfg.MaxAge))
}

// Crash stops l as a killed process would: its goroutines end, but its
// webhook leases stay held until they lapse.
func (l *Log) Crash() {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.cancel()
		l.wg.Wait()
	})
}
