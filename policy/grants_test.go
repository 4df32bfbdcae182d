package policy

import (
	"context"
	"testing"
	"time"
)

// TestCoveringGrant: the shipped grant rule, asked through the engine as
// the approval service asks it, names the grant covering a held HIGH
// request of its session, and none for another session, an expired
// grant, or a CRITICAL request.
func TestCoveringGrant(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	held := func(session, level string) Input {
		return Input{Mode: "PERMISSIVE", Request: Request{Kind: "run_code", SessionID: session, Language: "python", TimeoutS: 30},
			Risk: Risk{Level: level, Patterns: []RiskPattern{{ID: "subprocess", Level: level}}}, Principal: Principal{Tenant: "t1"}}
	}
	live := Grant{ID: "gr_1", Scope: "session", Tenant: "t1", SessionID: "s1", Language: "python", Level: "HIGH",
		Patterns: []string{"subprocess"}, ExpiresAt: time.Now().Add(time.Hour)}
	expired := live
	expired.ExpiresAt = time.Now().Add(-time.Second)
	critical := live
	critical.Level = "CRITICAL"
	cases := []struct {
		name   string
		in     Input
		grants []Grant
		want   string
	}{
		{"its session", held("s1", "HIGH"), []Grant{live}, "gr_1"},
		{"another session", held("s2", "HIGH"), []Grant{live}, ""},
		{"expired", held("s1", "HIGH"), []Grant{expired}, ""},
		{"critical", held("s1", "CRITICAL"), []Grant{critical}, ""},
		{"no grants", held("s1", "HIGH"), nil, ""},
	}
	for _, tc := range cases {
		got, err := e.CoveringGrant(ctx, tc.in, tc.grants)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.name, got, err, tc.want)
		}
	}
}

// TestGrantMisses: the policy says why a grant of the session does not
// cover a request with a pattern it lacks, and names nothing for one
// that covers it.
func TestGrantMisses(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{EvalTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Mode: "PERMISSIVE", Request: Request{Kind: "run_code", SessionID: "s1", Language: "python", TimeoutS: 30},
		Risk:      Risk{Level: "HIGH", Patterns: []RiskPattern{{ID: "subprocess"}, {ID: "socket"}}},
		Principal: Principal{Tenant: "t1"}}
	near := Grant{ID: "gr_near", Scope: "session", Tenant: "t1", SessionID: "s1", Language: "python", Level: "HIGH",
		Patterns: []string{"subprocess"}, ExpiresAt: time.Now().Add(time.Hour)}
	full := near
	full.ID, full.Patterns = "gr_full", []string{"subprocess", "socket"}
	got, err := e.GrantMisses(ctx, in, []Grant{near, full})
	if err != nil || len(got) != 1 || len(got["gr_near"]) != 1 || got["gr_near"][0] != "pattern socket is not among the grant's" {
		t.Fatalf("%v %v", got, err)
	}
}
