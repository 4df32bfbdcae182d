package recheck

import (
	"testing"
	"time"
)

func TestPassed(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	cases := []struct {
		name string
		do   func(*Passed)
		at   time.Time
		want bool
	}{
		{"never checked", func(*Passed) {}, t0, false},
		{"just passed", func(p *Passed) { p.Pass(p.Begin(), t0) }, t0, true},
		{"within the window", func(p *Passed) { p.Pass(p.Begin(), t0) }, t0.Add(Within - time.Millisecond), true},
		{"window over", func(p *Passed) { p.Pass(p.Begin(), t0) }, t0.Add(Within), false},
		{"forgotten", func(p *Passed) { p.Pass(p.Begin(), t0); p.Forget() }, t0, false},
		{"passed again after forgetting", func(p *Passed) { p.Forget(); p.Pass(p.Begin(), t0) }, t0.Add(time.Second), true},
		{"forgotten while checking", func(p *Passed) { tok := p.Begin(); p.Forget(); p.Pass(tok, t0) }, t0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p Passed
			c.do(&p)
			if got := p.Fresh(c.at); got != c.want {
				t.Errorf("Fresh = %v, want %v", got, c.want)
			}
		})
	}
}
