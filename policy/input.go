package policy

import (
	"fmt"
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

// value is in as OPA's input value, with input.executors from the cache.
func (in Input) value(cache *executorsValue) (ast.Value, error) {
	m := in.Map()
	delete(m, "executors")
	v, err := ast.InterfaceToValue(m)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(ast.Object)
	if !ok {
		return nil, fmt.Errorf("policy input is a %T, not an object", v)
	}
	execs, err := cache.get(in.Executors)
	if err != nil {
		return nil, err
	}
	obj.Insert(ast.InternedTerm("executors"), ast.NewTerm(execs))
	return obj, nil
}
