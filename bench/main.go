// Command bench drives a real gateway process over HTTP and measures each
// scenario against its baseline in the same run, alternating blocks of A
// and B so that machine drift hits both sides alike (issue 9).
//
//	go run ./bench                      # every scenario, print only
//	go run ./bench -out docs            # and write docs/performance.md, docs/perf/
//	go run ./bench -soak 10m -out docs  # the soak run instead
//	go run ./bench -render docs         # re-render the report from docs/perf/*.json
//	go run ./bench -faults 15m -out docs # the fault soak (root): docs/reliability.md
//
// Scenarios: SAFE Python via subprocess vs python3 and srt; STRICT Python
// via Docker (fresh and warm) vs the docker CLI; the same via gVisor (a
// second gateway with the isolation upgrade at LOW) vs docker run under
// runsc and runc; a stateful pandas cell in the session's kernel vs the
// same code as a stateless run_code (both docker); aio run_code vs sandboxd
// directly; policy evaluation vs OPA's trivial allow; 64 KiB workspace
// reads and writes vs os.ReadFile/os.WriteFile; a mixed agent workload at
// several concurrencies; the same workload on one gateway (SQLite), one
// PostgreSQL replica and three behind a round-robin client (fleet);
// issue 27's sessions: a request through a non-owner replica vs the owner,
// the manager's session open vs a SQLite point write and read, and a
// run's run.finished webhook vs the run's own round trip (sessions);
// issue 28's E2B front end: commands.run and runCode against REST execute
// and stateful run_code on the same session, and Sandbox.create to first
// command output (e2b, bench/e2b.go).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type opts struct {
	levels      []int
	mixedLevels []int
	n           int
	block       int
	srtN        int
	dockerN     int
	kernelN     int
	pauseN      int
	dockerBlock int
	aioN        int
	policyN     int
	egressN     int
	filesN      int
	forwardN    int
	openN       int
	eventsN     int
	ttfoN       int
	k8sN        int
	e2bCreateN  int
	ttfoBlock   int
	ttfoGap     time.Duration
	mixedDur    time.Duration
	think       time.Duration
	image       string
	only        map[string]bool
}

func main() {
	var o opts
	levels := flag.String("c", "1,8", "concurrency levels of the subprocess scenario")
	mixed := flag.String("mixed-c", "1,8,32", "concurrent sessions of the mixed workload")
	flag.IntVar(&o.n, "n", 500, "samples per side and level (subprocess)")
	flag.IntVar(&o.block, "block", 25, "requests per alternating block")
	flag.IntVar(&o.srtN, "srt-n", 150, "samples of srt (slower) per level")
	flag.IntVar(&o.dockerN, "docker-n", 40, "samples per side of the Docker scenario")
	flag.IntVar(&o.kernelN, "kernel-n", 40, "samples per side of the kernel scenario")
	flag.IntVar(&o.pauseN, "pause-n", 20, "samples per side of the pause scenario (pause.go)")
	flag.IntVar(&o.dockerBlock, "docker-block", 5, "requests per alternating block (Docker)")
	flag.IntVar(&o.aioN, "aio-n", 300, "samples per side of the aio scenario")
	flag.IntVar(&o.policyN, "policy-n", 3000, "samples per side of the policy scenario")
	flag.IntVar(&o.egressN, "egress-n", 20, "downloads per side of the egress scenario (its setup side takes 20× as many)")
	flag.IntVar(&o.filesN, "files-n", 1000, "samples per side of each file scenario")
	flag.IntVar(&o.forwardN, "forward-n", 1000, "samples per side of the forwarding GET (sessions; the forwarded execute takes a quarter as many)")
	flag.IntVar(&o.openN, "open-n", 2000, "samples per side of the session open scenario (sessions)")
	flag.IntVar(&o.eventsN, "events-n", 300, "runs whose run.finished webhook is timed (sessions; issue 27 wants at least 200)")
	flag.IntVar(&o.e2bCreateN, "e2b-create-n", 30, "E2B sandboxes created for the create-to-first-output figure")
	flag.IntVar(&o.ttfoN, "ttfo-n", 100, "samples per side and tier of the time-to-first-output scenario")
	flag.IntVar(&o.k8sN, "k8s-n", 20, "warm-pool claims of the k8s scenario (half as many cold pods, 5x as many warm run_code per side)")
	flag.IntVar(&o.ttfoBlock, "ttfo-block", 10, "requests per alternating block (time to first output)")
	flag.DurationVar(&o.ttfoGap, "ttfo-gap", 500*time.Millisecond, "untimed wait before each time-to-first-output sample: sessions arriving one at a time (0: back to back, a burst the pools cannot refill for)")
	flag.DurationVar(&o.mixedDur, "mixed-duration", 30*time.Second, "duration of each mixed workload level")
	flag.DurationVar(&o.think, "docker-think", time.Second, "untimed pause before each paced warm Docker run (an agent's model call)")
	flag.StringVar(&o.image, "image", "sandgate/runtime:latest", "image of the docker run baseline")
	only := flag.String("only", "", "comma-separated scenarios to run (subprocess,rootcost,docker,gvisor,kernel,pause,aio,policy,files,mixed,fleet,egress,sessions,ttfo,e2b; ttfo-subprocess, ttfo-docker, ttfo-gvisor or ttfo-aio for one tier; k8s (the test cluster); sessions-forward, sessions-open or sessions-events for one part of sessions); empty: all")
	out := flag.String("out", "", "write the report under this docs directory (performance.md, perf/)")
	readme := flag.String("readme", "", "README whose perf:begin/perf:end block gets the headline figures")
	render := flag.String("render", "", "only re-render the report under this docs directory from its JSON")
	jsonOut := flag.String("json", "", "also write the raw results to this file")
	flag.BoolVar(&mergeOut, "merge", false, "with -out: keep the scenarios this run did not measure from the results.json already there (a -only run then updates its sections instead of replacing the report)")
	soakDur := flag.Duration("soak", 0, "run the soak (the mixed workload for this long) instead of the scenarios")
	soakC := flag.Int("soak-c", 8, "concurrent sessions of the soak")
	soakEvery := flag.Duration("soak-interval", 5*time.Second, "soak sampling interval")
	var fo faultOpts
	flag.DurationVar(&fo.dur, "faults", 0, "run the fault soak (issue 21) for at least this long instead of the scenarios")
	flag.IntVar(&fo.rounds, "faults-rounds", 3, "the fault soak injects every fault at least this many times")
	flag.DurationVar(&fo.gap, "faults-gap", 15*time.Second, "workload-only time between two faults")
	flag.DurationVar(&fo.warmup, "faults-warmup", 20*time.Second, "workload before the first fault")
	flag.IntVar(&fo.workers, "faults-workers", 6, "concurrent sessions of the fault soak's workload")
	flag.IntVar(&fo.aioMax, "faults-aio-max", 8, "aio max_instances of the fault soak's gateway")
	flag.BoolVar(&fo.ciVariant, "faults-ci", false, "mark the run as the short CI variant")
	flag.StringVar(&fo.only, "faults-only", "", "inject only these faults (comma-separated names; for work on one finding)")
	flag.Parse()
	fo.interval, fo.out, fo.jsonOut = *soakEvery, *out, *jsonOut
	o.levels, o.mixedLevels = parseLevels(*levels), parseLevels(*mixed)
	if *only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(*only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	// SIGINT or SIGTERM cancels the runs, so that the gateway is still
	// stopped with SIGTERM and removes its containers and instances.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	switch {
	case *render != "":
		err = renderReport(*render, *readme)
	case fo.dur > 0:
		err = runFaultSoak(ctx, fo)
	case *soakDur > 0:
		err = runSoak(ctx, *soakDur, *soakC, *soakEvery, *out, *readme)
	default:
		err = run(ctx, o, *out, *readme, *jsonOut)
	}
	cancel()
	if err != nil {
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

// machine describes where the figures were taken.
type machine struct {
	NProc  int    `json:"nproc"`
	Model  string `json:"cpu_model"`
	Kernel string `json:"kernel"`
	GoVer  string `json:"go"`
}

func thisMachine() machine {
	m := machine{NProc: runtime.NumCPU(), GoVer: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	// The generated report and README block do not count as changes.
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/perf", ":!docs/performance.md", ":!README.md").Output(); err == nil && len(st) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// report is the raw result set (docs/perf/results.json).
type report struct {
	Date         time.Time         `json:"date"`
	Commit       string            `json:"commit"`
	Machine      machine           `json:"machine"`
	WallS        float64           `json:"wall_s"`
	Subprocess   []abResult        `json:"subprocess,omitempty"`
	Docker       *abResult         `json:"docker,omitempty"`
	DockerThinkS float64           `json:"docker_think_s,omitempty"`
	GVisor       *abResult         `json:"gvisor,omitempty"`
	Kernel       *abResult         `json:"kernel,omitempty"`
	Pause        *abResult         `json:"pause,omitempty"`
	AIO          *abResult         `json:"aio,omitempty"`
	Policy       *policyResult     `json:"policy,omitempty"`
	Egress       *egressResult     `json:"egress,omitempty"`
	Files        []abResult        `json:"files,omitempty"`
	Mixed        []mixedResult     `json:"mixed,omitempty"`
	RootCost     *rootCostResult   `json:"root_cost,omitempty"`
	Fleet        *fleetResult      `json:"fleet,omitempty"`
	Sessions     *sessionsResult   `json:"sessions,omitempty"`
	TTFO         *ttfoResult       `json:"ttfo,omitempty"`
	E2B          *e2bResult        `json:"e2b,omitempty"`
	K8s          *k8sResult        `json:"k8s,omitempty"`
	Unavailable  map[string]string `json:"unavailable,omitempty"`
	GatewayRSSMB float64           `json:"gateway_rss_mb_end"`
}

func (o opts) want(s string) bool { return o.only == nil || o.only[s] }

func run(ctx context.Context, o opts, out, readme, jsonOut string) error {
	start := time.Now()
	rep := report{Date: time.Now().UTC(), Commit: gitCommit(), Machine: thisMachine(), Unavailable: map[string]string{}}
	// The egress scenario runs the proxy in this process: it needs no
	// gateway.
	if o.want("egress") {
		if r, err := scenarioEgress(ctx, o); err != nil {
			fmt.Fprintf(os.Stderr, "bench: egress unavailable: %v\n", err)
			rep.Unavailable["egress"] = err.Error()
		} else {
			rep.Egress = &r
		}
	}
	// The scenarios that start gateways of their own (rootcost, gvisor,
	// fleet) and egress do without the shared one.
	var gw *gatewayProc
	startGoroutines := 0
	if slices.ContainsFunc([]string{"subprocess", "docker", "aio", "policy", "files", "mixed", "kernel", "e2b", "ttfo", "ttfo-subprocess", "ttfo-docker", "ttfo-aio", "k8s"}, o.want) {
		var err error
		if gw, err = startGateway(ctx); err != nil {
			return err
		}
		defer gw.stop()
		startGoroutines = gw.goroutines()
	}
	// A scenario that cannot run here is recorded as unavailable with its
	// reason, and the others still run.
	fail := func(name string, err error) {
		fmt.Fprintf(os.Stderr, "bench: %s unavailable: %v\n", name, err)
		rep.Unavailable[name] = err.Error()
	}
	if o.want("subprocess") {
		if r, err := scenarioSubprocess(ctx, gw, o); err != nil {
			fail("subprocess", err)
		} else {
			rep.Subprocess = r
		}
	}
	if o.want("rootcost") {
		if r, err := scenarioRootCost(ctx, 300); err != nil {
			fail("rootcost", err)
		} else {
			rep.RootCost = &r
		}
	}
	if o.want("docker") {
		if r, err := scenarioDocker(ctx, gw, o); err != nil {
			fail("docker", err)
		} else {
			rep.Docker, rep.DockerThinkS = &r, o.think.Seconds()
		}
	}
	if o.want("gvisor") {
		if r, err := scenarioGVisor(ctx, o); err != nil {
			fail("gvisor", err)
		} else {
			rep.GVisor, rep.DockerThinkS = &r, o.think.Seconds()
		}
	}
	if o.want("kernel") {
		if r, err := scenarioKernel(ctx, gw, o); err != nil {
			fail("kernel", err)
		} else {
			rep.Kernel = &r
		}
	}
	if o.want("pause") {
		if r, err := scenarioPause(ctx, o); err != nil {
			fail("pause", err)
		} else {
			rep.Pause = &r
		}
	}
	if o.want("e2b") {
		if r, err := scenarioE2B(ctx, gw, o); err != nil {
			fail("e2b", err)
		} else {
			rep.E2B = &r
		}
	}
	if o.want("aio") {
		if r, err := scenarioAIO(ctx, gw, o); err != nil {
			fail("aio", err)
		} else {
			rep.AIO = &r
		}
	}
	if o.want("policy") {
		if r, err := scenarioPolicy(ctx, gw, o); err != nil {
			fail("policy", err)
		} else {
			rep.Policy = &r
		}
	}
	if o.want("files") {
		if r, err := scenarioFiles(ctx, gw, o); err != nil {
			fail("files", err)
		} else {
			rep.Files = r
		}
	}
	if o.want("mixed") {
		deny := gw.denies(ctx)
		for _, c := range o.mixedLevels {
			m := runMixed(ctx, gw, c, o.mixedDur, deny, true, nil)
			m.print()
			rep.Mixed = append(rep.Mixed, m)
		}
	}
	if o.want("fleet") {
		if r, err := scenarioFleet(ctx, o); err != nil {
			fail("fleet", err)
		} else {
			rep.Fleet = &r
		}
	}
	rep.Sessions = runSessions(ctx, o, fail)
	if slices.ContainsFunc([]string{"ttfo", "ttfo-subprocess", "ttfo-docker", "ttfo-gvisor", "ttfo-aio"}, o.want) {
		if r, err := scenarioTTFO(ctx, gw, o); err != nil {
			fail("ttfo", err)
		} else {
			rep.TTFO = &r
		}
	}
	if o.want("k8s") {
		if r, err := scenarioK8s(ctx, gw, o); err != nil {
			fail("k8s", err)
		} else {
			rep.K8s = &r
		}
	}
	if gw != nil {
		rep.GatewayRSSMB = gw.rssMB()
		fmt.Printf("gateway at the end: RSS %.1f MB, %d goroutines (%d at start)\n", rep.GatewayRSSMB, gw.goroutines(), startGoroutines)
	}
	return writeReport(rep, start, out, readme, jsonOut)
}

// writeReport writes the results (JSON, and the report when out is set).
func writeReport(rep report, start time.Time, out, readme, jsonOut string) error {
	rep.WallS = time.Since(start).Seconds()
	b, _ := json.Marshal(rep)
	if out != "" && mergeOut {
		var err error
		if b, err = mergeResults(filepath.Join(out, "perf", "results.json"), b); err != nil {
			return err
		}
	}
	if jsonOut != "" {
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(out, "perf"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "perf", "results.json"), b, 0o644); err != nil {
		return err
	}
	return renderReport(out, readme)
}

func runSoak(ctx context.Context, d time.Duration, c int, every time.Duration, out, readme string) error {
	gw, err := startGateway(ctx)
	if err != nil {
		return err
	}
	defer gw.stop()
	// Warm-up outside the series: the sessions' interpreters and containers.
	runMixed(ctx, gw, c, min(30*time.Second, d/10), false, false, nil)
	r := soak(ctx, gw, c, d, every)
	r.Date, r.Commit, r.Machine = time.Now().UTC(), gitCommit(), thisMachine()
	for name, f := range r.Flat {
		fmt.Printf("soak %-16s last half min %.1f median %.1f max %.1f: flat %v\n", name, f.Min, f.Median, f.Max, f.Flat)
	}
	r.Workload.print()
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(out, "perf"), 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(r, "", " ")
	if err := os.WriteFile(filepath.Join(out, "perf", "soak.json"), b, 0o644); err != nil {
		return err
	}
	return renderReport(out, readme)
}
