package audit_test

import (
	"testing"

	"github.com/sandgate/sandgate/audit"
)

// decided is a record of a policy decision, as the manager writes one.
func decided(i int) audit.Record {
	r := minimal(i)
	r.Action, r.DecisionID = "allow", "dec-"+r.RequestID
	if i%2 == 1 {
		r.WouldBe = "deny"
		r.Reasons = []audit.Reason{{Code: "risk.critical", Message: "critical", Enforcement: "dryrun"}}
	}
	return r
}

// TestDecisionIDJoinsTheDecisionLog: a record keeps its decision's
// decision_id and would-be action, GET /v1/audit?decision_id= finds it,
// a write-ahead completion leaves both as they were, and the chain seals
// them: blanking a decision_id is named as an edit.
func TestDecisionIDJoinsTheDecisionLog(t *testing.T) {
	for name, d := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			db := d.open(t, "a")
			appendN(t, db, 2, minimal) // records of requests no decision was made for
			recs := appendN(t, db, 4, decided)
			started := decided(9)
			started.Outcome = audit.OutcomeStarted
			if err := db.Append(t.Context(), &started); err != nil {
				t.Fatal(err)
			}
			started.Outcome = audit.OutcomeOK
			if err := db.(audit.Completer).Complete(t.Context(), &started); err != nil {
				t.Fatal(err)
			}
			for _, want := range append(recs, started) {
				got := queryAll(t, db, audit.Query{DecisionID: want.DecisionID})
				if len(got) != 1 || got[0].ID != want.ID || got[0].WouldBe != want.WouldBe {
					t.Fatalf("decision_id %s: %+v, want record %d would_be %q", want.DecisionID, got, want.ID, want.WouldBe)
				}
				if want.WouldBe != "" && (len(got[0].Reasons) != 1 || got[0].Reasons[0].Enforcement != "dryrun") {
					t.Fatalf("reasons %+v, want the dryrun reason", got[0].Reasons)
				}
			}
			if rep, err := audit.Verify(t.Context(), db, ""); err != nil || len(rep.Broken) != 0 || rep.Records["a"] != 7 {
				t.Fatalf("Verify: %+v %v", rep, err)
			}
			d.tamper(t, `UPDATE records SET decision_id = '' WHERE id = 4`)
			rep, err := audit.Verify(t.Context(), db, "a")
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Broken) != 1 || rep.Broken[0].ID != 4 {
				t.Fatalf("Verify after blanking a decision_id: %+v, want record 4 named", rep)
			}
		})
	}
}
