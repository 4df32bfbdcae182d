package audit

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// stmtCache holds a store's prepared statements by query text. SQLite
// compiles a query string (parse, plan) on every call; a run's writes
// (its events, its record's completion) are a few fixed queries, and
// compiling them was about a tenth of the gateway's CPU per run.
type stmtCache struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// get returns query's statement, prepared with prepare on first use. Two
// first uses at once may both prepare; one statement is kept.
func (c *stmtCache) get(ctx context.Context, query string, prepare func(context.Context, string) (*sql.Stmt, error)) (*sql.Stmt, error) {
	c.mu.Lock()
	st := c.m[query]
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := prepare(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("audit: prepare: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if kept := c.m[query]; kept != nil {
		_ = st.Close()
		return kept, nil
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st, nil
}

// Prepare returns query's statement for the writer; see Database.
func (s *SQLite) Prepare(ctx context.Context, query string) (*sql.Stmt, error) {
	return s.stmts.get(ctx, query, func(ctx context.Context, q string) (*sql.Stmt, error) {
		if err := s.lockWriter(ctx); err != nil {
			return nil, err
		}
		defer s.unlockWriter()
		return s.w.PrepareContext(ctx, q)
	})
}

// Prepare returns query's statement for the pool; see Database.
func (p *Postgres) Prepare(ctx context.Context, query string) (*sql.Stmt, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	return p.stmts.get(ctx, query, p.db.PrepareContext)
}
