package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
)

// benchAuditRecords is the log the audit view's benchmarks read.
const benchAuditRecords = 10000

// benchAuditServer is an admin-only API over a SQLite log of
// benchAuditRecords records (synchronous=normal while it is filled: the
// setup is not what is measured).
func benchAuditServer(b *testing.B) (*audit.SQLite, *httptest.Server) {
	b.Helper()
	st, err := audit.Open(b.Context(), filepath.Join(b.TempDir(), "audit.db"), audit.Options{Synchronous: "normal"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < benchAuditRecords; i += 16 {
				rec := audit.Record{RequestID: fmt.Sprintf("r-%d", i), Kind: "run_code", Tenant: "t", SessionID: fmt.Sprintf("s%d", i%50),
					Principal: "agent:a", Language: "python", RiskLevel: "SAFE", Action: "allow", Executor: "subprocess",
					Outcome: audit.OutcomeOK, DurationMS: 12, HTTPStatus: 200}
				if err := st.Append(context.Background(), &rec); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	auth, err := NewAuth([]Token{NewToken("root", RoleAdmin, adminTok)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{}, Deps{Audit: st, AuditChain: st, Auth: auth}))
	b.Cleanup(srv.Close)
	return st, srv
}

func benchGet(b *testing.B, url string) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+adminTok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || n == 0 {
		b.Fatalf("%s: %d", url, res.StatusCode)
	}
}

// BenchmarkAuditVerify: GET /v1/audit/verify over 10,000 records, and
// ratio_to_direct against audit.Verify called in-process on the same
// database in the same run (what the HTTP layer and the report add).
func BenchmarkAuditVerify(b *testing.B) {
	st, srv := benchAuditServer(b)
	start := time.Now()
	const direct = 5
	for range direct {
		if rep, err := audit.Verify(b.Context(), st, ""); err != nil || len(rep.Broken) > 0 {
			b.Fatal(err, rep.Broken)
		}
	}
	base := time.Since(start) / direct
	b.ResetTimer()
	for b.Loop() {
		benchGet(b, srv.URL+"/v1/audit/verify")
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(base.Microseconds())/1000, "direct_ms")
	b.ReportMetric(float64(per)/float64(base), "ratio_to_direct")
}

// BenchmarkAuditExport: GET /v1/audit/export of 10,000 records as NDJSON,
// and ratio_to_query against reading the same records through Query's
// pages in-process in the same run.
func BenchmarkAuditExport(b *testing.B) {
	st, srv := benchAuditServer(b)
	start := time.Now()
	const direct = 5
	for range direct {
		q, n := audit.Query{Limit: audit.DefaultMaxQueryLimit}, 0
		for {
			page, err := st.Query(b.Context(), q)
			if err != nil {
				b.Fatal(err)
			}
			n += len(page.Records)
			if page.NextCursor == 0 {
				break
			}
			q.Before = page.NextCursor
		}
		if n != benchAuditRecords {
			b.Fatalf("query read %d records", n)
		}
	}
	base := time.Since(start) / direct
	b.ResetTimer()
	for b.Loop() {
		benchGet(b, srv.URL+"/v1/audit/export")
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(base.Microseconds())/1000, "query_ms")
	b.ReportMetric(float64(per)/float64(base), "ratio_to_query")
}
