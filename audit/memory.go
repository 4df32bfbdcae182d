package audit

import (
	"context"
	"sync"
	"time"
)

// Memory is an in-memory Store FOR UNIT TESTS of packages that depend on
// audit (the manager, the API). It follows the same rules as SQLite
// (validation, ID and time assignment, query order, filters and paging) but
// keeps nothing across restarts and has no size bound. Never use it in the
// gateway itself.
//
// The zero value is ready to use.
type Memory struct {
	mu      sync.Mutex
	records []Record // in ID order; ID i+1 at index i
	// AppendErr, if set, is returned by every Append (which then stores
	// nothing), so tests can exercise a caller's handling of audit failures.
	AppendErr error
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{} }

// Append stores a copy of rec; see SQLite.Append.
func (m *Memory) Append(_ context.Context, rec *Record) error {
	if err := rec.validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.AppendErr != nil {
		return m.AppendErr
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	rec.Time = rec.Time.UTC()
	rec.ID = int64(len(m.records) + 1)
	m.records = append(m.records, rec.clone())
	return nil
}

// Query returns one page of records matching q, newest first; see
// SQLite.Query.
func (m *Memory) Query(_ context.Context, q Query) (Page, error) {
	q, err := q.normalize(DefaultMaxQueryLimit)
	if err != nil {
		return Page{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	page := Page{Records: []Record{}}
	for i := len(m.records) - 1; i >= 0; i-- {
		r := &m.records[i]
		if !q.matches(r) {
			continue
		}
		if len(page.Records) == q.Limit {
			page.NextCursor = page.Records[q.Limit-1].ID
			break
		}
		page.Records = append(page.Records, r.clone())
	}
	return page, nil
}

// Records returns a copy of every stored record, oldest first.
func (m *Memory) Records() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, len(m.records))
	for i := range m.records {
		out[i] = m.records[i].clone()
	}
	return out
}

// matches reports whether r passes q's filters.
func (q Query) matches(r *Record) bool {
	return (q.Tenant == "" || r.Tenant == q.Tenant) &&
		(q.SessionID == "" || r.SessionID == q.SessionID) &&
		(q.Kind == "" || r.Kind == q.Kind) &&
		(q.DecisionID == "" || r.DecisionID == q.DecisionID) &&
		(q.Before <= 0 || r.ID < q.Before) &&
		(q.Since.IsZero() || !r.Time.Before(q.Since)) &&
		(q.Until.IsZero() || r.Time.Before(q.Until)) &&
		(q.Outcome == "" || r.Outcome == q.Outcome)
}
