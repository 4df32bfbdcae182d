// Command bench drives a real gateway process over HTTP and measures it
// against a raw baseline in the same run, alternating blocks of A and B so
// that machine drift hits both sides alike.
//
//	go run ./bench -c 1,8 -n 1000
//
// Scenario "subprocess": run_code of SAFE Python print(1) through the
// gateway versus spawning `python3 -c 'print(1)'` directly. It also checks
// the gateway's RSS after a long run and that goroutines do not grow.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	levels := flag.String("c", "1,8", "concurrency levels")
	n := flag.Int("n", 1000, "requests per side and level")
	block := flag.Int("block", 50, "requests per alternating block")
	soakN := flag.Int("rss-requests", 10000, "requests for the RSS and goroutine check (0 skips)")
	jsonOut := flag.String("json", "", "write raw results to this file")
	flag.Parse()
	ctx := context.Background()
	if err := run(ctx, parseLevels(*levels), *n, *block, *soakN, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// sandboxPython finds python3 on the PATH the subprocess executor uses, so
// the baseline runs the same interpreter (a version manager's shim on the
// caller's PATH would make the baseline slower than the real thing).
func sandboxPython() (string, error) {
	for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		p := dir + "/python3"
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("python3 not found in /usr/local/bin:/usr/bin:/bin")
}

func parseLevels(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && v > 0 {
			out = append(out, v)
		}
	}
	return out
}

// report is the raw result set.
type report struct {
	Date      time.Time   `json:"date"`
	Scenarios []abResult  `json:"scenarios"`
	Soak      *soakResult `json:"soak,omitempty"`
}

func run(ctx context.Context, levels []int, n, block, soakN int, jsonOut string) error {
	gw, err := startGateway(ctx)
	if err != nil {
		return err
	}
	defer gw.stop()
	rep := report{Date: time.Now().UTC()}
	gwSide := gw.runCodeSide("print(1)", "python")
	python, err := sandboxPython()
	if err != nil {
		return err
	}
	raw := rawSide(python, "-I", "-u", "-c", "print(1)")
	if _, err := measure(ctx, gwSide, 1, 50); err != nil { // warm-up
		return err
	}
	for _, c := range levels {
		res, err := ab(ctx, "subprocess print(1)", gwSide, raw, c, n, block)
		if err != nil {
			return err
		}
		rep.Scenarios = append(rep.Scenarios, res)
		res.print(os.Stdout)
	}
	if soakN > 0 {
		s, err := gw.soak(ctx, gwSide, 8, soakN)
		if err != nil {
			return err
		}
		rep.Soak = &s
		s.print(os.Stdout)
	}
	if jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		return os.WriteFile(jsonOut, b, 0o644)
	}
	return nil
}
