package policy

import (
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
)

// term returns s as a shared, immutable OPA string term. OPA interns only
// a fixed list of common strings (ast.InternedTerm allocates for anything
// else), so the input's keys ("request", "code_sha256", ...) and its
// small enumerated values (modes, languages, levels, pattern ids, roles)
// were a fresh term each per decision: about 70 of a decision's 800
// allocations. Terms used as input are never mutated by evaluation (OPA
// shares its own interned terms the same way).
//
// The cache is bounded: past termCacheMax distinct strings it stops
// growing and allocates, so a client that sends ever-new values (tenant
// names, say) costs an allocation, never memory.
func term(s string) *ast.Term {
	if t, ok := terms.Load(s); ok {
		return t.(*ast.Term)
	}
	t := ast.StringTerm(s)
	if len(s) <= termMaxLen && termCount.Load() < termCacheMax {
		if prev, loaded := terms.LoadOrStore(s, t); loaded {
			return prev.(*ast.Term)
		}
		termCount.Add(1)
	}
	return t
}

const (
	termCacheMax = 4096
	termMaxLen   = 128
)

var (
	terms     sync.Map // string -> *ast.Term
	termCount atomic.Int64
)
