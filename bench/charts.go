package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// soakSeries are the soak's series, in the report's order.
var soakSeries = []struct{ key, title string }{
	{"rss_mb", "RSS (MB)"},
	{"goroutines", "goroutines"},
	{"fds", "open file descriptors"},
	{"containers", "live containers"},
	{"child_processes", "child processes"},
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

func latencyChartName(r abResult) string {
	return fmt.Sprintf("latency-%s-c%d.svg", r.Key, r.Concurrency)
}

// ecdf is the empirical distribution of latencies: x in ms, y the share of
// requests at or below it.
func ecdf(lat []float64) plotter.XYs {
	s := slices.Clone(lat)
	slices.Sort(s)
	// At most about 1000 points: the rest would only grow the SVG.
	step := max(1, len(s)/1000)
	pts := make(plotter.XYs, 0, len(s)/step+1)
	for i := 0; i < len(s); i += step {
		pts = append(pts, plotter.XY{X: math.Max(s[i], 1e-3), Y: float64(i+1) / float64(len(s))})
	}
	if n := len(s); n > 0 && (n-1)%step != 0 {
		pts = append(pts, plotter.XY{X: math.Max(s[n-1], 1e-3), Y: 1})
	}
	return pts
}

func save(p *plot.Plot, path string, w, h vg.Length) error {
	return p.Save(w, h, path)
}

// latencyPlot draws the latency distributions of several labelled series.
func latencyPlot(title string, labels []string, lats [][]float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "share of requests ≤ latency"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	// Headroom above 1 keeps the legend clear of the curves.
	p.Y.Min, p.Y.Max = 0, 1+0.09*float64(len(lats))
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25}, {Value: 0.5, Label: "0.5"}, {Value: 0.75}, {Value: 1, Label: "1"}})
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	for i, l := range lats {
		if len(l) == 0 {
			continue
		}
		line, err := plotter.NewLine(ecdf(l))
		if err != nil {
			return nil, err
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(labels[i], line)
	}
	return p, nil
}

func drawCharts(dir string, rep *report, sk *soakResult) error {
	var all []abResult
	all = append(all, rep.Subprocess...)
	if rep.Docker != nil {
		all = append(all, *rep.Docker)
	}
	if rep.GVisor != nil {
		all = append(all, *rep.GVisor)
	}
	if rep.Kernel != nil {
		all = append(all, *rep.Kernel)
	}
	if rep.Pause != nil {
		all = append(all, *rep.Pause)
	}
	if rep.AIO != nil {
		all = append(all, *rep.AIO)
	}
	if rep.Policy != nil {
		all = append(all, rep.Policy.abResult)
	}
	all = append(all, rep.Files...)
	all = append(all, rep.Sessions.abResults()...)
	all = append(all, rep.TTFO.abResults()...)
	for _, r := range all {
		var labels []string
		var lats [][]float64
		for _, s := range r.Sides {
			if s.Unavailable == "" {
				labels = append(labels, fmt.Sprintf("%s (p50 %s)", s.Label, ms(s.Stats.P50)))
				lats = append(lats, s.Stats.LatMS)
			}
		}
		title := r.Name
		if i := strings.Index(title, ":"); i > 0 {
			title = title[:i]
		}
		p, err := latencyPlot(fmt.Sprintf("%s, concurrency %d", title, r.Concurrency), labels, lats)
		if err != nil {
			return err
		}
		if err := save(p, filepath.Join(dir, latencyChartName(r)), 16*vg.Centimeter, 10*vg.Centimeter); err != nil {
			return err
		}
	}
	if len(rep.Mixed) > 0 {
		if err := throughputChart(filepath.Join(dir, "throughput.svg"), rep.Mixed); err != nil {
			return err
		}
		var labels []string
		var lats [][]float64
		for _, m := range rep.Mixed {
			labels = append(labels, fmt.Sprintf("%d sessions (p50 %s)", m.Concurrency, ms(m.All.P50)))
			lats = append(lats, m.All.LatMS)
		}
		p, err := latencyPlot("mixed agent workload, all operations", labels, lats)
		if err != nil {
			return err
		}
		if err := save(p, filepath.Join(dir, "latency-mixed.svg"), 16*vg.Centimeter, 10*vg.Centimeter); err != nil {
			return err
		}
	}
	if err := sessionsCharts(dir, rep.Sessions); err != nil {
		return err
	}
	if sk != nil {
		return soakChart(filepath.Join(dir, "soak.svg"), sk)
	}
	return nil
}

// throughputChart draws req/s and the latency quantiles against sessions.
func throughputChart(path string, ms []mixedResult) error {
	rps := plot.New()
	rps.Title.Text = "mixed workload: throughput against concurrency"
	rps.X.Label.Text = "concurrent sessions"
	rps.Y.Label.Text = "requests per second"
	rps.Add(plotter.NewGrid())
	var pts plotter.XYs
	for _, m := range ms {
		pts = append(pts, plotter.XY{X: float64(m.Concurrency), Y: m.All.RPS})
	}
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	line.Color, points.Color = palette[0], palette[0]
	rps.Add(line, points)
	rps.Y.Min = 0

	lat := plot.New()
	lat.Title.Text = "latency against concurrency (all operations)"
	lat.X.Label.Text = "concurrent sessions"
	lat.Y.Label.Text = "ms (log scale)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.Add(plotter.NewGrid())
	lat.Legend.Top, lat.Legend.Left = true, true
	for i, q := range []struct {
		name string
		f    func(stats) float64
	}{{"p50", func(s stats) float64 { return s.P50 }}, {"p95", func(s stats) float64 { return s.P95 }}, {"p99", func(s stats) float64 { return s.P99 }}} {
		var pts plotter.XYs
		for _, m := range ms {
			pts = append(pts, plotter.XY{X: float64(m.Concurrency), Y: math.Max(q.f(m.All), 1e-3)})
		}
		l, pp, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, pp.Color = palette[i], palette[i]
		lat.Add(l, pp)
		lat.Legend.Add(q.name, l, pp)
	}
	return tile(path, [][]*plot.Plot{{rps, lat}}, 24*vg.Centimeter, 9*vg.Centimeter)
}

// soakChart draws each soak series against time, one panel each.
func soakChart(path string, sk *soakResult) error {
	var rows [][]*plot.Plot
	for i, k := range soakSeries {
		p := plot.New()
		f := sk.Flat[k.key]
		verdict := "flat"
		if !f.Flat {
			verdict = "NOT flat"
		}
		p.Title.Text = fmt.Sprintf("%s: last half %s", k.title, verdict)
		p.X.Label.Text = "seconds"
		p.Add(plotter.NewGrid())
		var pts plotter.XYs
		for _, s := range sk.Samples {
			v := map[string]float64{"rss_mb": s.RSSMB, "goroutines": float64(s.Goroutines), "fds": float64(s.FDs),
				"containers": float64(s.Containers), "child_processes": float64(s.Children)}[k.key]
			pts = append(pts, plotter.XY{X: s.T, Y: v})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width = palette[i%len(palette)], vg.Points(1.2)
		p.Add(l)
		// The ±10% band around the second half's median.
		if len(pts) > 0 {
			t0, t1 := pts[len(pts)/2].X, pts[len(pts)-1].X
			for _, y := range []float64{f.Median * 0.9, f.Median * 1.1} {
				b, err := plotter.NewLine(plotter.XYs{{X: t0, Y: y}, {X: t1, Y: y}})
				if err != nil {
					return err
				}
				b.Color, b.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(3), vg.Points(3)}
				p.Add(b)
			}
		}
		p.Y.Min = 0
		rows = append(rows, []*plot.Plot{p})
	}
	return tile(path, rows, 18*vg.Centimeter, vg.Length(len(rows))*5*vg.Centimeter)
}

// tile draws plots on a grid into one SVG.
func tile(path string, plots [][]*plot.Plot, w, h vg.Length) error {
	img := vgsvg.New(w, h)
	dc := draw.New(img)
	t := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, t, dc)
	for j := range plots {
		for i := range plots[j] {
			plots[j][i].Draw(canvases[j][i])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := img.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
