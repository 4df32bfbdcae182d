package audit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// The tests in this file run against every Store, so Memory keeps behaving
// like SQLite.

func TestStore_RoundTrip(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			want := fullRecord()
			in := fullRecord()
			if err := s.Append(t.Context(), &in); err != nil {
				t.Fatalf("Append: %v", err)
			}
			if in.ID <= 0 {
				t.Fatalf("Append set ID %d, want > 0", in.ID)
			}
			if !in.Time.Equal(want.Time) {
				t.Errorf("Append changed a caller-set time: %v, want %v", in.Time, want.Time)
			}
			page, err := s.Query(t.Context(), audit.Query{})
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			if len(page.Records) != 1 {
				t.Fatalf("Query returned %d records, want 1", len(page.Records))
			}
			got := page.Records[0]
			want.ID = in.ID
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip mismatch\n got: %+v\nwant: %+v", got, want)
			}
		})
	}
}

func TestStore_AppendAssignsTimeAndIDs(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			before := time.Now()
			recs := appendN(t, s, 5, minimal)
			after := time.Now()
			for i, r := range recs {
				if r.Time.Location() != time.UTC {
					t.Errorf("record %d: time %v not in UTC", i, r.Time)
				}
				if r.Time.Before(before.Add(-time.Millisecond)) || r.Time.After(after.Add(time.Millisecond)) {
					t.Errorf("record %d: time %v outside [%v, %v]", i, r.Time, before, after)
				}
				if i > 0 && (r.ID <= recs[i-1].ID || r.Time.Before(recs[i-1].Time)) {
					t.Errorf("record %d (id %d, %v) not after record %d (id %d, %v)", i, r.ID, r.Time, i-1, recs[i-1].ID, recs[i-1].Time)
				}
			}
			// A caller-set time in another zone is stored in UTC.
			rec := minimal(99)
			rec.Time = time.Date(2026, 1, 2, 3, 4, 5, 6000000, time.FixedZone("X", 3600))
			if err := s.Append(t.Context(), &rec); err != nil {
				t.Fatal(err)
			}
			page, err := s.Query(t.Context(), audit.Query{Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if got := page.Records[0].Time; got.Location() != time.UTC || !got.Equal(rec.Time) {
				t.Errorf("stored time %v, want %v in UTC", got, rec.Time)
			}
		})
	}
}

func TestStore_AppendValidation(t *testing.T) {
	cases := []struct {
		name string
		rec  *audit.Record
	}{
		{"nil", nil},
		{"no kind", &audit.Record{Outcome: audit.OutcomeOK}},
		{"no outcome", &audit.Record{Kind: "run_code"}},
		{"id preset", &audit.Record{ID: 7, Kind: "run_code", Outcome: audit.OutcomeOK}},
	}
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					err := s.Append(t.Context(), tc.rec)
					if !errors.Is(err, audit.ErrInvalidRecord) {
						t.Fatalf("Append: err = %v, want ErrInvalidRecord", err)
					}
				})
			}
			page, err := s.Query(t.Context(), audit.Query{})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Records) != 0 {
				t.Errorf("invalid records were stored: %+v", page.Records)
			}
		})
	}
}

func TestStore_Query(t *testing.T) {
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	// 30 records: sessions a/b/c in turn, kinds run_code and execute in
	// turn, one second apart; tenant t1 has the first 10 records, t2 the
	// rest, so the same session name exists under both.
	mk := func(i int) audit.Record {
		r := minimal(i)
		r.Tenant = "t1"
		if i >= 10 {
			r.Tenant = "t2"
		}
		r.SessionID = string(rune('a' + i%3))
		r.Kind = []string{"run_code", "execute"}[i%2]
		r.Time = base.Add(time.Duration(i) * time.Second)
		if i%7 == 3 {
			r.Outcome = audit.OutcomeDenied
		}
		return r
	}
	cases := []struct {
		name     string
		q        audit.Query
		wantIdx  []int // indexes into the appended records, in result order
		wantMore bool
	}{
		{"newest first, default limit", audit.Query{}, rangeDesc(29, 0), false},
		{"limit", audit.Query{Limit: 3}, []int{29, 28, 27}, true},
		{"negative limit means default", audit.Query{Limit: -5}, rangeDesc(29, 0), false},
		{"limit equal to matches", audit.Query{Limit: 30}, rangeDesc(29, 0), false},
		{"session", audit.Query{SessionID: "b"}, []int{28, 25, 22, 19, 16, 13, 10, 7, 4, 1}, false},
		{"kind", audit.Query{Kind: "execute", Limit: 4}, []int{29, 27, 25, 23}, true},
		{"session and kind", audit.Query{SessionID: "a", Kind: "run_code"}, []int{24, 18, 12, 6, 0}, false},
		{"since is inclusive", audit.Query{Since: base.Add(27 * time.Second)}, []int{29, 28, 27}, false},
		{"since in another zone", audit.Query{Since: base.Add(28 * time.Second).In(time.FixedZone("Y", -7200))}, []int{29, 28}, false},
		{"tenant", audit.Query{Tenant: "t1", Limit: 4}, []int{9, 8, 7, 6}, true},
		{"tenant and session", audit.Query{Tenant: "t1", SessionID: "b"}, []int{7, 4, 1}, false},
		{"the same session under the other tenant", audit.Query{Tenant: "t2", SessionID: "b", Limit: 2}, []int{28, 25}, true},
		{"unknown tenant", audit.Query{Tenant: "t3"}, nil, false},
		{"unknown session", audit.Query{SessionID: "zzz"}, nil, false},
		{"since in the future", audit.Query{Since: base.Add(time.Hour)}, nil, false},
		{"until is exclusive", audit.Query{Until: base.Add(2 * time.Second)}, []int{1, 0}, false},
		{"since and until", audit.Query{Since: base.Add(5 * time.Second), Until: base.Add(8 * time.Second)}, []int{7, 6, 5}, false},
		{"outcome", audit.Query{Outcome: audit.OutcomeDenied}, []int{24, 17, 10, 3}, false},
		{"outcome, tenant and window", audit.Query{Outcome: audit.OutcomeDenied, Tenant: "t2", Until: base.Add(20 * time.Second)},
			[]int{17, 10}, false},
		{"unknown outcome", audit.Query{Outcome: "nope"}, nil, false},
	}
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			recs := appendN(t, s, 30, mk)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					page, err := s.Query(t.Context(), tc.q)
					if err != nil {
						t.Fatalf("Query: %v", err)
					}
					want := make([]int64, 0, len(tc.wantIdx))
					for _, i := range tc.wantIdx {
						want = append(want, recs[i].ID)
					}
					if got := ids(page.Records); !slices.Equal(got, want) {
						t.Errorf("ids = %v, want %v", got, want)
					}
					if page.Records == nil {
						t.Error("Records is nil; want an empty slice so JSON shows []")
					}
					if more := page.NextCursor != 0; more != tc.wantMore {
						t.Errorf("NextCursor = %d, want more=%v", page.NextCursor, tc.wantMore)
					}
					if tc.wantMore && page.NextCursor != page.Records[len(page.Records)-1].ID {
						t.Errorf("NextCursor = %d, want the last returned id %d", page.NextCursor, page.Records[len(page.Records)-1].ID)
					}
				})
			}
		})
	}
}

func TestStore_QueryPagination(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			recs := appendN(t, s, 25, func(i int) audit.Record {
				r := minimal(i)
				r.SessionID = []string{"x", "y"}[i%2]
				return r
			})
			for _, limit := range []int{1, 7, 13, 24, 25, 26} {
				t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
					got := queryAll(t, s, audit.Query{Limit: limit})
					want := ids(recs)
					slices.Reverse(want)
					if !slices.Equal(ids(got), want) {
						t.Errorf("walked ids %v, want %v", ids(got), want)
					}
					gotX := queryAll(t, s, audit.Query{Limit: limit, SessionID: "x"})
					if len(gotX) != 13 {
						t.Errorf("session x: walked %d records, want 13", len(gotX))
					}
				})
			}
		})
	}
}

func TestStore_QueryInvalid(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			_, err := open(t).Query(t.Context(), audit.Query{Before: -1})
			if !errors.Is(err, audit.ErrInvalidQuery) {
				t.Fatalf("Query(Before: -1): err = %v, want ErrInvalidQuery", err)
			}
			at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			_, err = open(t).Query(t.Context(), audit.Query{Since: at, Until: at})
			if !errors.Is(err, audit.ErrInvalidQuery) {
				t.Fatalf("Query(Since = Until): err = %v, want ErrInvalidQuery", err)
			}
		})
	}
}

func TestStore_StoredRecordsAreCopies(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			rec := fullRecord()
			if err := s.Append(t.Context(), &rec); err != nil {
				t.Fatal(err)
			}
			rec.RiskPatterns[0] = "changed"
			rec.Detail["host"] = "changed"
			rec.Approval.Status = "changed"
			*rec.ExitCode = 99
			page, err := s.Query(t.Context(), audit.Query{})
			if err != nil {
				t.Fatal(err)
			}
			got := page.Records[0]
			if got.RiskPatterns[0] != "py.subprocess" || got.Detail["host"] != "example.org" ||
				got.Approval.Status != "approved" || *got.ExitCode != 3 {
				t.Fatalf("stored record changed through the caller's copy: %+v", got)
			}
			got.Reasons[0].Code = "changed"
			again, err := s.Query(t.Context(), audit.Query{})
			if err != nil {
				t.Fatal(err)
			}
			if again.Records[0].Reasons[0].Code != "risk.high" {
				t.Fatal("stored record changed through a query result")
			}
		})
	}
}

func TestRecord_JSON(t *testing.T) {
	zero := 0
	rec := audit.Record{
		ID: 7, RequestID: "r", Kind: "execute", Outcome: audit.OutcomeOK, ExitCode: &zero,
		Time: time.Date(2026, 1, 2, 3, 4, 5, 6000000, time.UTC),
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	// Optional fields are omitted; exit_code 0 is kept (it is a pointer);
	// duration_ms is always present.
	want := `{"id":7,"request_id":"r","time":"2026-01-02T03:04:05.006Z","kind":"execute","outcome":"ok","exit_code":0,"duration_ms":0}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
	pb, err := json.Marshal(audit.Page{Records: []audit.Record{}})
	if err != nil {
		t.Fatal(err)
	}
	if string(pb) != `{"records":[]}` {
		t.Errorf("empty page JSON = %s", pb)
	}
}

// rangeDesc returns hi, hi-1, ..., lo.
func rangeDesc(hi, lo int) []int {
	var out []int
	for i := hi; i >= lo; i-- {
		out = append(out, i)
	}
	return out
}
