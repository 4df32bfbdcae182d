package policy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkDecideLoggingOnVsOff alternates a decision on an engine without
// decision logs and one with them (uploading to a loopback receiver that
// discards), and reports each p50 and their ratio: issue 32 asks for at
// most 1.2.
func BenchmarkDecideLoggingOnVsOff(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer sink.Close()
	cfg, _ := json.Marshal(map[string]any{
		"services":      map[string]any{"sink": map[string]any{"url": sink.URL}},
		"decision_logs": map[string]any{"service": "sink", "reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 2}},
	})
	off := newEngine(b, Options{})
	on := newEngine(b, Options{OPAConfig: cfg})
	defer func() { _ = on.Close(context.Background()) }()
	in := benchInput()
	ctx := context.Background()
	var offT, onT []time.Duration
	for b.Loop() {
		t0 := time.Now()
		off.Decide(ctx, in)
		t1 := time.Now()
		on.Decide(ctx, in)
		offT, onT = append(offT, t1.Sub(t0)), append(onT, time.Since(t1))
	}
	pOff, pOn := p50(offT), p50(onT)
	b.ReportMetric(float64(pOff)/1e3, "off-p50-µs")
	b.ReportMetric(float64(pOn)/1e3, "on-p50-µs")
	b.ReportMetric(float64(pOn)/float64(pOff), "ratio")
}
