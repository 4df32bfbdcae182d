package audit

import (
	"database/sql"
	"testing"
)

// TestHeaderHashOfOlderRecords: a record without decision_id and would_be
// (every record written before audit migration 4) hashes exactly as the
// header did before those fields existed, so chains written by an older
// gateway still verify.
func TestHeaderHashOfOlderRecords(t *testing.T) {
	r := chainRow{RequestID: "r1", Time: "2026-01-01T00:00:00.000000000Z", Kind: "run_code", Tenant: "t",
		SessionID: "s", Principal: "agent:a", Language: "python", CodeSHA256: "abc", CodeBytes: 7, RiskLevel: "LOW",
		RiskPatterns: sql.NullString{String: `["p"]`, Valid: true}, Action: "allow", PolicyRevision: "sha256:x",
		Path: "", Replica: "local"}
	v3 := struct {
		RequestID, Time, Kind, Tenant, SessionID, Principal, Language, CodeSHA256 string
		CodeBytes                                                                 int64
		RiskLevel                                                                 string
		RiskPatterns                                                              *string
		Action, PolicyRevision                                                    string
		Approval                                                                  *string
		Path, Replica                                                             string
	}{r.RequestID, r.Time, r.Kind, r.Tenant, r.SessionID, r.Principal, r.Language, r.CodeSHA256, r.CodeBytes,
		r.RiskLevel, nullable(r.RiskPatterns), r.Action, r.PolicyRevision, nullable(r.Approval), r.Path, r.Replica}
	if got, want := r.headerHash("prev"), digest("prev", v3); got != want {
		t.Fatalf("header hash of a record without decision_id changed: %s, want %s", got, want)
	}
	r.DecisionID = "d1"
	if r.headerHash("prev") == digest("prev", v3) {
		t.Fatal("decision_id is not sealed by the header hash")
	}
	withID := r.headerHash("prev")
	r.WouldBe = "deny"
	if r.headerHash("prev") == withID {
		t.Fatal("would_be is not sealed by the header hash")
	}
}
