package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPumpKeepsWhatThePipeHeldAtTheCut: when a job cuts its pipes off
// (a detached child holds them open) before the pump read the program's
// last output (the pump was short of CPU), that output still reaches the
// stream; a writer that never stops does not hold the pump.
func TestPumpKeepsWhatThePipeHeldAtTheCut(t *testing.T) {
	for _, tc := range []struct {
		name     string
		held     string
		endless  bool
		wantHead string
	}{
		{"last output in the pipe", "the last line\n", false, "the last line\n"},
		{"more than one read's worth", strings.Repeat("y", 60<<10) + "end\n", false, strings.Repeat("y", 60<<10) + "end\n"},
		{"a writer that goes on", "first\n", true, "first\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close() // the detached child's end: never closed before the cut
			if _, err := w.WriteString(tc.held); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			if tc.endless {
				go func() {
					for {
						select {
						case <-stop:
							return
						default:
							_, _ = w.WriteString("more\n")
						}
					}
				}()
			}
			// The cut, before the pump ever ran.
			if err := r.SetReadDeadline(time.Now()); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			done := make(chan struct{})
			go func() { pump(r, &got); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the pump did not return after the cut")
			}
			if !strings.HasPrefix(got.String(), tc.wantHead) || (!tc.endless && got.String() != tc.wantHead) {
				t.Errorf("pumped %d bytes %q..., want %q", got.Len(), got.String()[:min(20, got.Len())], tc.wantHead[:min(20, len(tc.wantHead))])
			}
		})
	}
}
