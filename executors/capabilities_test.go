package executors_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/sandgate/sandgate/executors"
)

func TestCapabilitiesCheck(t *testing.T) {
	full := executors.Capabilities{NetworkIsolation: true, MemoryLimit: true, ProcessLimit: true, KillDetached: true}
	pgroup := executors.Capabilities{MemoryLimit: true, Isolation: "process-group"}
	limits := executors.Limits{MemoryMB: 512, MaxProcs: 64}
	tests := []struct {
		name    string
		caps    executors.Capabilities
		spec    executors.Spec
		missing []string
		msg     string
	}{
		{name: "full caps run the default obligations", caps: full, spec: executors.Spec{Limits: limits}},
		{name: "no limits asked, none needed", caps: executors.Capabilities{NetworkIsolation: true, KillDetached: true},
			spec: executors.Spec{}},
		{name: "process-group mode lacks network, detached kill and process limit", caps: pgroup,
			spec:    executors.Spec{Limits: limits},
			missing: []string{"network_isolation", "kill_detached", "process_limit"},
			msg:     "subprocess cannot enforce network isolation, the timeout on detached processes, the process limit (process-group mode)"},
		{name: "network grant is needed for network=true", caps: full, spec: executors.Spec{Network: true},
			missing: []string{"network_grant"},
			msg:     "subprocess cannot enforce network access through the egress proxy"},
		{name: "memory limit", caps: executors.Capabilities{NetworkIsolation: true, KillDetached: true},
			spec: executors.Spec{Limits: executors.Limits{MemoryMB: 64}}, missing: []string{"memory_limit"},
			msg: "subprocess cannot enforce the memory limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.caps.Check(executors.KindSubprocess, tt.spec)
			if tt.missing == nil {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			var ce *executors.CapabilityError
			if !errors.As(err, &ce) || !errors.Is(err, executors.ErrCapabilityMissing) {
				t.Fatalf("Check = %v, want a CapabilityError", err)
			}
			if !slices.Equal(ce.Missing, tt.missing) || err.Error() != tt.msg {
				t.Errorf("Check = %q %v, want %q %v", err, ce.Missing, tt.msg, tt.missing)
			}
			if errors.Is(err, executors.ErrUnavailable) {
				t.Error("a missing capability must not look like unavailability (the manager would re-probe and loop)")
			}
		})
	}
}

// TestCapabilitiesMapMatchesJSON keeps the policy input (Map) and the API's
// JSON (/readyz, GET /v1/policy) the same shape.
func TestCapabilitiesMapMatchesJSON(t *testing.T) {
	c := executors.Capabilities{NetworkIsolation: true, KillDetached: true, RootFS: "image:x@sha256:1", Isolation: "container"}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON map[string]any
	if err := json.Unmarshal(b, &fromJSON); err != nil {
		t.Fatal(err)
	}
	m := c.Map()
	if !slices.Equal(slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(fromJSON))) {
		t.Fatalf("Map keys %v, JSON keys %v", slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(fromJSON)))
	}
	for k, v := range fromJSON {
		if m[k] != v {
			t.Errorf("%s: Map %v, JSON %v", k, m[k], v)
		}
	}
	for _, name := range []string{"network_isolation", "kill_detached"} {
		if !c.Has(name) {
			t.Errorf("Has(%q) = false", name)
		}
	}
	if c.Has("memory_limit") || c.Has("no_such_capability") {
		t.Error("Has reports a capability the value lacks")
	}
}
