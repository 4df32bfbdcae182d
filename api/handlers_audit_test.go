package api

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// auditBase is the time of the first record auditFixture appends.
var auditBase = time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)

// auditFixture appends 12 records one minute apart: tenants t1 (first 6)
// and t2, sessions s0/s1/s2 in turn, kinds run_code and egress in turn,
// and every fourth one denied. It returns their ids in order.
func auditFixture(t *testing.T, st audit.Store) []int64 {
	t.Helper()
	var ids []int64
	for i := range 12 {
		r := audit.Record{RequestID: fmt.Sprintf("req-%d", i), Kind: []string{"run_code", "egress"}[i%2],
			Tenant: "t1", SessionID: fmt.Sprintf("s%d", i%3), Outcome: audit.OutcomeOK,
			Time: auditBase.Add(time.Duration(i) * time.Minute)}
		if i >= 6 {
			r.Tenant = "t2"
		}
		if i%4 == 0 {
			r.Outcome, r.Action = audit.OutcomeDenied, "deny"
		}
		if err := st.Append(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// TestAuditFilters: the list and the export select the same records by
// tenant, session, kind, outcome and time window.
func TestAuditFilters(t *testing.T) {
	e := newEnv(t, envOpts{})
	ids := auditFixture(t, e.audit)
	at := func(i int) string { return auditBase.Add(time.Duration(i) * time.Minute).Format(time.RFC3339) }
	cases := []struct {
		name  string
		query string
		want  []int // fixture indexes, newest first
	}{
		{"the fixture's whole window", "since=" + at(0) + "&until=" + at(12), []int{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
		{"tenant", "tenant=t2", []int{11, 10, 9, 8, 7, 6}},
		{"tenant and session", "tenant=t1&session_id=s1", []int{4, 1}},
		{"kind", "kind=egress&tenant=t1", []int{5, 3, 1}},
		{"outcome", "outcome=denied", []int{8, 4, 0}},
		{"window: since inclusive, until exclusive", "since=" + at(3) + "&until=" + at(6), []int{5, 4, 3}},
		{"everything at once", "tenant=t2&kind=run_code&outcome=denied&since=" + at(7), []int{8}},
		{"nothing matches", "session_id=nope", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var want []int64
			for _, i := range tc.want {
				want = append(want, ids[i])
			}
			r := e.do("GET", "/v1/audit?"+tc.query, adminTok, nil)
			if r.status != 200 {
				t.Fatalf("list: %d %s", r.status, r.raw)
			}
			var page audit.Page
			if err := json.Unmarshal(r.raw, &page); err != nil {
				t.Fatal(err)
			}
			if got := recordIDs(page.Records); !slices.Equal(got, want) {
				t.Errorf("list ids %v, want %v", got, want)
			}
			if got := recordIDs(exportRecords(t, e, tc.query)); !slices.Equal(got, want) {
				t.Errorf("export ids %v, want %v", got, want)
			}
		})
	}
}

// TestAuditBadFilters: a filter that is unknown or malformed is a 400
// invalid_request naming it, on the list and the export alike, never a
// silently wider answer.
func TestAuditBadFilters(t *testing.T) {
	e := newEnv(t, envOpts{})
	cases := []struct{ query, field string }{
		{"sesion_id=s1", "sesion_id"},
		{"since=yesterday", "since"},
		{"until=2026-11-27", "until"},
		{"since=2026-11-27T10:00:00Z&until=2026-11-27T09:00:00Z", "until"},
		{"since=2026-11-27T10:00:00Z&until=2026-11-27T10:00:00Z", "until"},
		{"kind=Run+Code", "kind"},
		{"outcome=DENIED", "outcome"},
		{"limit=-1", "limit"},
		{"cursor=x", "cursor"},
		{"tenant=" + strings.Repeat("t", 257), "tenant"},
	}
	for _, path := range []string{"/v1/audit", "/v1/audit/export"} {
		for _, tc := range cases {
			r := e.do("GET", path+"?"+tc.query, adminTok, nil)
			if r.status != 400 || r.errCode() != "invalid_request" || !strings.Contains(string(r.raw), `"field":"`+tc.field+`"`) {
				t.Errorf("%s?%.60s: %d %s, want 400 invalid_request on field %s", path, tc.query, r.status, r.raw, tc.field)
			}
		}
	}
	if r := e.do("GET", "/v1/audit/verify?replica=local&x=1", adminTok, nil); r.status != 400 || r.errCode() != "invalid_request" {
		t.Errorf("verify with an unknown parameter: %d %s", r.status, r.raw)
	}
	for _, id := range []string{"0", "-3", "abc"} {
		if r := e.do("GET", "/v1/audit/records/"+id, adminTok, nil); r.status != 400 || r.errCode() != "invalid_request" {
			t.Errorf("record %s: %d %s", id, r.status, r.raw)
		}
	}
}

// TestAuditAdminOnly: the log names every tenant's sessions and
// principals, so only an admin token reads it.
func TestAuditAdminOnly(t *testing.T) {
	e := newEnv(t, envOpts{})
	ids := auditFixture(t, e.audit)
	for _, path := range []string{"/v1/audit", fmt.Sprintf("/v1/audit/records/%d", ids[0]), "/v1/audit/verify", "/v1/audit/export"} {
		for tok, want := range map[string]int{"": 401, "wrong-token": 401, agentTok: 403, approverTok: 403, adminTok: 200} {
			if r := e.do("GET", path, tok, nil); r.status != want {
				t.Errorf("%s with %q: %d, want %d", path, tok, r.status, want)
			}
		}
	}
}

// TestAuditRecordAndExport: one record by id (404 for none), and the
// export's media type, file name and line per record, across pages of
// the store and capped by limit.
func TestAuditRecordAndExport(t *testing.T) {
	e := newEnv(t, envOpts{})
	ids := auditFixture(t, e.audit)
	r := e.do("GET", fmt.Sprintf("/v1/audit/records/%d", ids[4]), adminTok, nil)
	if r.status != 200 || r.body["request_id"] != "req-4" || r.body["outcome"] != "denied" {
		t.Errorf("record: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/audit/records/99999", adminTok, nil); r.status != 404 || r.errCode() != "not_found" {
		t.Errorf("missing record: %d %s", r.status, r.raw)
	}

	r = e.do("GET", "/v1/audit/export?tenant=t1", adminTok, nil)
	if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("export Content-Type %q", ct)
	}
	if cd := r.header.Get("Content-Disposition"); !strings.HasPrefix(cd, `attachment; filename="sandgate-audit-`) || !strings.HasSuffix(cd, `.ndjson"`) {
		t.Errorf("export Content-Disposition %q", cd)
	}
	if n := bytes.Count(r.raw, []byte("\n")); n != 6 {
		t.Errorf("export of t1: %d lines, want 6:\n%s", n, r.raw)
	}
	// The export is in the log, with who asked for what.
	if page, err := e.audit.Query(t.Context(), audit.Query{Kind: "audit.export"}); err != nil || len(page.Records) != 1 ||
		page.Records[0].Principal != "admin:root" || page.Records[0].Detail["query"] != "tenant=t1" {
		t.Errorf("audit.export records: %v %+v", err, page.Records)
	}

	// More records than one page of the store (1000).
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 130 {
				rec := audit.Record{RequestID: fmt.Sprintf("bulk-%d-%d", w, i), Kind: "execute", Tenant: "bulk", Outcome: audit.OutcomeOK}
				if err := e.audit.Append(t.Context(), &rec); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	all := exportRecords(t, e, "tenant=bulk")
	if len(all) != 1040 {
		t.Fatalf("bulk export: %d records, want 1040", len(all))
	}
	if !slices.IsSortedFunc(all, func(a, b audit.Record) int { return int(b.ID - a.ID) }) {
		t.Error("export is not newest first")
	}
	if got := exportRecords(t, e, "tenant=bulk&limit=1005"); len(got) != 1005 || got[0].ID != all[0].ID {
		t.Errorf("export with limit=1005: %d records", len(got))
	}
	if got := exportRecords(t, e, "tenant=bulk&limit=0"); len(got) != 1040 {
		t.Errorf("export with limit=0: %d records, want all 1040", len(got))
	}
}

// TestAuditVerifyNamesEditedRecord: the chain verifies; after one
// record's outcome is rewritten in the database behind the gateway's
// back, the check names that record, with what it now says.
func TestAuditVerifyNamesEditedRecord(t *testing.T) {
	e := newEnv(t, envOpts{})
	ids := auditFixture(t, e.audit)
	r := e.do("GET", "/v1/audit/verify", adminTok, nil)
	if r.status != 200 || r.body["verified"] != true || r.body["total"] != float64(12) || r.body["broken"] != nil {
		t.Fatalf("intact chain: %d %s", r.status, r.raw)
	}
	tamperAudit(t, filepath.Join(e.dataDir, "audit.db"), fmt.Sprintf(`UPDATE records SET outcome = 'ok' WHERE id = %d`, ids[8]))
	r = e.do("GET", "/v1/audit/verify", adminTok, nil)
	var v auditVerification
	if err := json.Unmarshal(r.raw, &v); err != nil || r.status != 200 {
		t.Fatalf("verify: %d %s", r.status, r.raw)
	}
	if v.Verified || len(v.Broken) != 1 {
		t.Fatalf("edited chain: %s", r.raw)
	}
	b := v.Broken[0]
	if b.ID != ids[8] || b.Replica != "local" || !strings.Contains(b.Reason, "completion_hash") {
		t.Errorf("broken link %+v, want record %d's completion_hash", b.BrokenLink, ids[8])
	}
	if b.Record == nil || b.Record.RequestID != "req-8" || b.Record.Outcome != "ok" {
		t.Errorf("broken record %+v, want req-8 as edited (outcome ok)", b.Record)
	}
	// Each check is in the log it checked, with what it found.
	page, err := e.audit.Query(t.Context(), audit.Query{Kind: "audit.verify"})
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("audit.verify records: %v %+v", err, page.Records)
	}
	last := page.Records[0]
	if last.Principal != "admin:root" || last.Detail["verified"] != "false" || last.Detail["broken"] != fmt.Sprintf("local:%d", ids[8]) {
		t.Errorf("the check's record: %+v", last)
	}
}

// tamperAudit runs stmt on the audit database file as someone with
// access to it would: the triggers that refuse updates dropped first.
func tamperAudit(t *testing.T, path, stmt string) {
	t.Helper()
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, s := range []string{`DROP TRIGGER IF EXISTS records_no_update`, stmt} {
		if _, err := raw.ExecContext(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// exportRecords is GET /v1/audit/export?query as admin, decoded line by line.
func exportRecords(t *testing.T, e *env, query string) []audit.Record {
	t.Helper()
	r := e.do("GET", "/v1/audit/export?"+query, adminTok, nil)
	if r.status != 200 {
		t.Fatalf("export ?%s: %d %s", query, r.status, r.raw)
	}
	var out []audit.Record
	sc := bufio.NewScanner(bytes.NewReader(r.raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec audit.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.ID == 0 {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		out = append(out, rec)
	}
	return out
}

func recordIDs(recs []audit.Record) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

// TestAuditExportUnrecordedIsRefused: an export whose own record cannot
// be written (the audit disk is full) is refused with 500 internal, and
// no record leaves.
func TestAuditExportUnrecordedIsRefused(t *testing.T) {
	mem := audit.NewMemory()
	auditFixture(t, mem)
	mem.AppendErr = errors.New("disk full")
	auth, err := NewAuth([]Token{NewToken("root", RoleAdmin, adminTok)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{}, Deps{Audit: mem, Auth: auth}))
	defer srv.Close()
	e := &env{t: t, srv: srv}
	r := e.do("GET", "/v1/audit/export", adminTok, nil)
	if r.status != 500 || r.errCode() != "internal" || strings.Contains(string(r.raw), "req-") || strings.Contains(string(r.raw), "disk full") {
		t.Errorf("export without its record: %d %s", r.status, r.raw)
	}
	// Without a chained database there is nothing to verify: 404, said so.
	if r := e.do("GET", "/v1/audit/verify", adminTok, nil); r.status != 404 || r.errCode() != "not_found" {
		t.Errorf("verify without a chain: %d %s", r.status, r.raw)
	}
}
