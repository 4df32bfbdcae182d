package policy

import (
	"reflect"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
)

// executorsValue caches input.executors in OPA's form. The manager hands
// every request the same ExecutorState map until its availability cache
// refreshes (once a second at most), so converting it once per map, not
// once per request, takes about a hundred allocations off each decision.
// The map is keyed by its identity: a caller that mutated a map it had
// already passed would get a stale value, which the manager never does
// (the map is documented as shared and read-only).
type executorsValue struct {
	cur atomic.Pointer[executorsEntry]
}

// executorsEntry holds the map itself, not only its address: a map the
// cache no longer referenced could be collected and another allocated at
// the same address, which would then hit a stale value.
type executorsEntry struct {
	m map[string]ExecutorState
	v ast.Value
}

func (c *executorsValue) get(m map[string]ExecutorState) (ast.Value, error) {
	if e := c.cur.Load(); e != nil && m != nil && sameMap(e.m, m) {
		return e.v, nil
	}
	v, err := ast.InterfaceToValue(executorsMap(m))
	if err != nil {
		return nil, err
	}
	c.cur.Store(&executorsEntry{m: m, v: v})
	return v, nil
}

func sameMap(a, b map[string]ExecutorState) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// value is in as OPA's input value, built as ast terms directly (the same
// value as ast.InterfaceToValue(in.Map()), TestInputValueIsMapValue)
// rather than through a map converted per request, with input.executors
// from the cache. Keys and enumerated values are shared terms (term).
func (in Input) value(cache *executorsValue) (ast.Value, error) {
	execs, err := cache.get(in.Executors)
	if err != nil {
		return nil, err
	}
	patterns := make([]*ast.Term, len(in.Risk.Patterns))
	for i, p := range in.Risk.Patterns {
		patterns[i] = ast.ObjectTerm(
			ast.Item(term("id"), term(p.ID)),
			ast.Item(term("level"), term(p.Level)),
			ast.Item(term("line"), ast.InternedTerm(p.Line)),
		)
	}
	r := &in.Request
	return ast.NewObject(
		ast.Item(term("mode"), term(in.Mode)),
		ast.Item(term("request"), ast.ObjectTerm(
			ast.Item(term("kind"), term(r.Kind)),
			ast.Item(term("session_id"), ast.StringTerm(r.SessionID)),
			ast.Item(term("language"), term(r.Language)),
			ast.Item(term("code_bytes"), ast.InternedTerm(r.CodeBytes)),
			ast.Item(term("code_sha256"), ast.StringTerm(r.CodeSHA256)),
			ast.Item(term("timeout_s"), ast.InternedTerm(r.TimeoutS)),
			ast.Item(term("stateful"), ast.InternedTerm(r.Stateful)),
			ast.Item(term("detached"), ast.InternedTerm(r.Detached)),
			ast.Item(term("session_sandbox"), ast.InternedTerm(r.SessionSandbox)),
			ast.Item(term("context"), ast.ObjectTerm(
				ast.Item(term("needs_browser"), ast.InternedTerm(r.Context.NeedsBrowser)),
				ast.Item(term("needs_persistent_fs"), ast.InternedTerm(r.Context.NeedsPersistentFS)),
				ast.Item(term("needs_memory_snapshot"), ast.InternedTerm(r.Context.NeedsMemorySnapshot)),
			)),
		)),
		ast.Item(term("risk"), ast.ObjectTerm(
			ast.Item(term("level"), term(in.Risk.Level)),
			ast.Item(term("proven_safe"), ast.InternedTerm(in.Risk.ProvenSafe)),
			ast.Item(term("patterns"), ast.ArrayTerm(patterns...)),
		)),
		ast.Item(term("principal"), ast.ObjectTerm(
			ast.Item(term("role"), term(in.Principal.Role)),
			ast.Item(term("name"), term(in.Principal.Name)),
			ast.Item(term("tenant"), term(in.Principal.Tenant)),
		)),
		ast.Item(term("executors"), ast.NewTerm(execs)),
	), nil
}
