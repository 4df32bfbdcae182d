package main

import (
	"math"
	"testing"
)

// TestPairedP50Delta: the side-by-side difference is what one side adds in
// each block, whatever the machine's speed did between blocks; without the
// block size (an older result) there is none.
func TestPairedP50Delta(t *testing.T) {
	// Three blocks of 4: the machine is fast, slow (a 7 ms hump), fast.
	base := []float64{10, 11, 10, 12, 17, 18, 17, 19, 10, 10, 11, 10}
	plus := func(d float64, xs []float64) []float64 {
		out := make([]float64, len(xs))
		for i, x := range xs {
			out[i] = x + d
		}
		return out
	}
	// The gateway side met the slow hump in its first block too.
	gw := plus(1.5, base)
	copy(gw[0:4], plus(1.5, base[4:8]))
	cases := []struct {
		name   string
		block  int
		gw, dr []float64
		want   float64
		ok     bool
	}{
		{name: "a constant addition", block: 4, gw: plus(1.5, base), dr: base, want: 1.5, ok: true},
		{name: "one side met the slow hump once", block: 4, gw: gw, dr: base, want: 1.5, ok: true},
		{name: "no block size", block: 0, gw: gw, dr: base, ok: false},
		{name: "fewer latencies than a block", block: 20, gw: gw, dr: base, ok: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := abResult{Block: tc.block, Sides: []sideResult{
				{Label: "gateway", Stats: stats{LatMS: tc.gw}},
				{Label: "direct", Stats: stats{LatMS: tc.dr}},
			}}
			d, ok := r.pairedP50Delta("gateway", "direct")
			if ok != tc.ok || (ok && math.Abs(d-tc.want) > 1e-9) {
				t.Errorf("got %.3f %v, want %.3f %v", d, ok, tc.want, tc.ok)
			}
		})
	}
}
