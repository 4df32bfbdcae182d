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
// from the cache. Keys and small values are OPA's interned terms.
func (in Input) value(cache *executorsValue) (ast.Value, error) {
	execs, err := cache.get(in.Executors)
	if err != nil {
		return nil, err
	}
	patterns := make([]*ast.Term, len(in.Risk.Patterns))
	for i, p := range in.Risk.Patterns {
		patterns[i] = ast.ObjectTerm(
			ast.Item(ast.InternedTerm("id"), ast.InternedTerm(p.ID)),
			ast.Item(ast.InternedTerm("level"), ast.InternedTerm(p.Level)),
			ast.Item(ast.InternedTerm("line"), ast.InternedTerm(p.Line)),
		)
	}
	r := &in.Request
	return ast.NewObject(
		ast.Item(ast.InternedTerm("mode"), ast.InternedTerm(in.Mode)),
		ast.Item(ast.InternedTerm("request"), ast.ObjectTerm(
			ast.Item(ast.InternedTerm("kind"), ast.InternedTerm(r.Kind)),
			ast.Item(ast.InternedTerm("session_id"), ast.StringTerm(r.SessionID)),
			ast.Item(ast.InternedTerm("language"), ast.InternedTerm(r.Language)),
			ast.Item(ast.InternedTerm("code_bytes"), ast.InternedTerm(r.CodeBytes)),
			ast.Item(ast.InternedTerm("code_sha256"), ast.StringTerm(r.CodeSHA256)),
			ast.Item(ast.InternedTerm("timeout_s"), ast.InternedTerm(r.TimeoutS)),
			ast.Item(ast.InternedTerm("stateful"), ast.InternedTerm(r.Stateful)),
			ast.Item(ast.InternedTerm("detached"), ast.InternedTerm(r.Detached)),
			ast.Item(ast.InternedTerm("context"), ast.ObjectTerm(
				ast.Item(ast.InternedTerm("needs_browser"), ast.InternedTerm(r.Context.NeedsBrowser)),
				ast.Item(ast.InternedTerm("needs_persistent_fs"), ast.InternedTerm(r.Context.NeedsPersistentFS)),
			)),
		)),
		ast.Item(ast.InternedTerm("risk"), ast.ObjectTerm(
			ast.Item(ast.InternedTerm("level"), ast.InternedTerm(in.Risk.Level)),
			ast.Item(ast.InternedTerm("proven_safe"), ast.InternedTerm(in.Risk.ProvenSafe)),
			ast.Item(ast.InternedTerm("patterns"), ast.ArrayTerm(patterns...)),
		)),
		ast.Item(ast.InternedTerm("principal"), ast.ObjectTerm(
			ast.Item(ast.InternedTerm("role"), ast.InternedTerm(in.Principal.Role)),
			ast.Item(ast.InternedTerm("name"), ast.InternedTerm(in.Principal.Name)),
			ast.Item(ast.InternedTerm("tenant"), ast.InternedTerm(in.Principal.Tenant)),
		)),
		ast.Item(ast.InternedTerm("executors"), ast.NewTerm(execs)),
	), nil
}
