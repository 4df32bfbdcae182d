package workspace

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkFile64K measures the file API on a 64 KiB file against the raw
// baseline (os.WriteFile / os.ReadFile of the same bytes on the same file
// system), interleaved in one loop so that both see the same load. It
// reports raw-ns/op, api-ns/op and their ratio; ns/op is the two together.
//
//	go test -run '^$' -bench File64K -benchtime 2000x -count 3 ./workspace/
func BenchmarkFile64K(b *testing.B) {
	f := newFixture(b, Options{})
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcde\n"), 4096)
	raw := filepath.Join(f.base, "raw.txt")
	must(b, os.WriteFile(raw, data, 0o644))
	if _, err := f.w.Write(ctx, sess, "api.txt", WriteOverwrite, bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, rawOp, apiOp func() error) {
		var rawNS, apiNS time.Duration
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			t0 := time.Now()
			if err := rawOp(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := apiOp(); err != nil {
				b.Fatal(err)
			}
			rawNS += t1.Sub(t0)
			apiNS += time.Since(t1)
		}
		n := float64(b.N)
		b.ReportMetric(float64(rawNS.Nanoseconds())/n, "raw-ns/op")
		b.ReportMetric(float64(apiNS.Nanoseconds())/n, "api-ns/op")
		b.ReportMetric(float64(apiNS)/float64(rawNS), "ratio")
	}
	b.Run("write", func(b *testing.B) {
		run(b, func() error { return os.WriteFile(raw, data, 0o644) }, func() error {
			_, err := f.w.Write(ctx, sess, "api.txt", WriteOverwrite, bytes.NewReader(data))
			return err
		})
	})
	b.Run("read", func(b *testing.B) {
		run(b, func() error { _, err := os.ReadFile(raw); return err }, func() error {
			rf, err := f.w.OpenRaw(ctx, sess, "api.txt")
			if err != nil {
				return err
			}
			defer rf.Close()
			_, err = io.Copy(io.Discard, rf)
			return err
		})
	})
	b.Run("read-numbered", func(b *testing.B) {
		run(b, func() error { _, err := os.ReadFile(raw); return err }, func() error {
			_, err := f.w.ReadText(ctx, sess, "api.txt", 0, 0)
			return err
		})
	})
}
