package policy

import (
	"context"
	"sync"

	"github.com/open-policy-agent/opa/v1/storage"
)

// vetoStore is the store OPA's plugin manager writes bundles into. It
// forwards everything to an inmem store, but a transaction that changed
// policies or data is shown to check before it commits: a bundle the
// gateway's own compile refuses (strict mode, the input schemas, the
// refused built-ins, the required decision rule) then fails OPA's
// activation like any other bad bundle. The bundle plugin keeps the last
// good bundle, does not persist the refused one, and reports the error in
// its status, so one mechanism covers a bad signature, a Rego error and a
// policy only the gateway rejects.
//
// A commit hook (storage triggers) could not do this: triggers run after
// the commit, when the refused bundle is already in the store.
type vetoStore struct {
	storage.Store
	// check runs in the writing transaction before it commits; an error
	// aborts the transaction. apply runs after a successful commit with
	// what check returned.
	check func(ctx context.Context, txn storage.Transaction) (any, error)
	apply func(any)

	mu    sync.Mutex
	dirty map[storage.Transaction]bool
}

func newVetoStore(inner storage.Store, check func(context.Context, storage.Transaction) (any, error), apply func(any)) *vetoStore {
	return &vetoStore{Store: inner, check: check, apply: apply, dirty: map[storage.Transaction]bool{}}
}

func (s *vetoStore) mark(txn storage.Transaction) {
	s.mu.Lock()
	s.dirty[txn] = true
	s.mu.Unlock()
}

// take reports whether txn wrote anything, and forgets it.
func (s *vetoStore) take(txn storage.Transaction) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dirty[txn]
	delete(s.dirty, txn)
	return d
}

func (s *vetoStore) Write(ctx context.Context, txn storage.Transaction, op storage.PatchOp, p storage.Path, v any) error {
	s.mark(txn)
	return s.Store.Write(ctx, txn, op, p, v)
}

func (s *vetoStore) Truncate(ctx context.Context, txn storage.Transaction, params storage.TransactionParams, it storage.Iterator) error {
	s.mark(txn)
	return s.Store.Truncate(ctx, txn, params, it)
}

func (s *vetoStore) UpsertPolicy(ctx context.Context, txn storage.Transaction, id string, b []byte) error {
	s.mark(txn)
	return s.Store.UpsertPolicy(ctx, txn, id, b)
}

func (s *vetoStore) DeletePolicy(ctx context.Context, txn storage.Transaction, id string) error {
	s.mark(txn)
	return s.Store.DeletePolicy(ctx, txn, id)
}

// MakeDir keeps inmem's own implementation (storage.MakeDir would fall
// back to a generic one through Read and Write).
func (s *vetoStore) MakeDir(ctx context.Context, txn storage.Transaction, p storage.Path) error {
	s.mark(txn)
	if md, ok := s.Store.(storage.MakeDirer); ok {
		return md.MakeDir(ctx, txn, p)
	}
	return storage.MakeDir(ctx, s.Store, txn, p)
}

func (s *vetoStore) Abort(ctx context.Context, txn storage.Transaction) {
	s.take(txn)
	s.Store.Abort(ctx, txn)
}

// Commit checks a transaction that wrote before committing it. A refused
// transaction is aborted, as storage.Store requires of a failed Commit.
func (s *vetoStore) Commit(ctx context.Context, txn storage.Transaction) error {
	if !s.take(txn) || s.check == nil {
		return s.Store.Commit(ctx, txn)
	}
	v, err := s.check(ctx, txn)
	if err != nil {
		s.Store.Abort(ctx, txn)
		return err
	}
	if err := s.Store.Commit(ctx, txn); err != nil {
		return err
	}
	s.apply(v)
	return nil
}
