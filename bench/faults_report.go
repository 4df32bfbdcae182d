package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// opStats summarises one kind of request of the soak.
type opStats struct {
	N    int     `json:"n"`
	OK   int     `json:"ok"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	Errs int     `json:"non_2xx"`
}

// errorClass is every answer that was not a success, grouped by stable
// code and the fault in force, with the verdict on it.
type errorClass struct {
	Op      string `json:"op"`
	Answer  string `json:"answer"`
	Fault   string `json:"fault"`
	Count   int    `json:"count"`
	Allowed bool   `json:"allowed"`
	Why     string `json:"why"`
	Example string `json:"example,omitempty"`
}

// killingFaults kill sandboxes under running programs.
var killingFaults = map[string]bool{faultEngine: true, faultKill: true, faultAIORemoved: true, faultSandboxd: true}

func newSoakClient() *http.Client {
	return &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

// classify judges one failed request: a stable code is expected under any
// fault; internal only under the gateway's own disk full; a cut
// connection only when the gateway was killed; a wrong 2xx never.
func classify(r opRecord) (answer string, allowed bool, why string) {
	switch {
	case strings.HasPrefix(r.Bad, runFailed) && killingFaults[r.Fault]:
		return "200, the run failed", true, "the fault killed the run's sandbox; the answer says so"
	case r.Bad != "":
		return "2xx with a wrong result", false, "a success must be a correct result"
	case r.Status == 0 || r.Err != "":
		if r.Fault == faultGateway {
			return "connection cut", true, "in flight when the gateway was killed; the client retries"
		}
		return "connection error", false, "no answer although the gateway was up"
	case r.Code == "":
		return fmt.Sprintf("%d (no code)", r.Status), false, "every error carries a stable code"
	case r.Code == "internal":
		if diskFaults[r.Fault] {
			return fmt.Sprintf("%d internal", r.Status), true, "the gateway's own disk is full: fail closed"
		}
		return fmt.Sprintf("%d internal", r.Status), false, "internal outside the disk-full faults"
	case r.Fault == "":
		return fmt.Sprintf("%d %s", r.Status, r.Code), false, "an error with no fault in force"
	}
	return fmt.Sprintf("%d %s", r.Status, r.Code), true, "a clear error while " + r.Fault
}

// expectedAnswer is an answer the workload asks for on purpose: the
// timeout program's time limit, say. Nothing at the moment: a timed-out
// run is a 200 with timed_out.
func failed(r opRecord) bool { return r.Bad != "" || r.Err != "" || r.Status/100 != 2 }

func finishRun(run *faultRun, recs []opRecord) {
	lat := map[string][]time.Duration{}
	run.Ops = map[string]opStats{}
	classes := map[string]*errorClass{}
	for _, r := range recs {
		op := strings.TrimPrefix(r.Op, "probe:")
		st := run.Ops[op]
		st.N++
		if failed(r) {
			st.Errs++
			ans, ok, why := classify(r)
			key := op + "|" + ans + "|" + r.Fault
			c := classes[key]
			if c == nil {
				c = &errorClass{Op: op, Answer: ans, Fault: r.Fault, Allowed: ok, Why: why, Example: firstOf(r.Bad, r.Err)}
				classes[key] = c
			}
			c.Count++
			if !ok && len(run.Unexplained) < 40 {
				run.Unexplained = append(run.Unexplained, r)
			}
		} else {
			st.OK++
			lat[op] = append(lat[op], time.Duration(r.DurMS*float64(time.Millisecond)))
		}
		run.Ops[op] = st
	}
	for op, l := range lat {
		s := summarize(l, time.Second)
		st := run.Ops[op]
		st.P50, st.P95 = s.P50, s.P95
		run.Ops[op] = st
	}
	for _, c := range classes {
		run.Errors = append(run.Errors, *c)
	}
	slices.SortFunc(run.Errors, func(a, b errorClass) int {
		return strings.Compare(a.Fault+a.Op+a.Answer, b.Fault+b.Op+b.Answer)
	})
	run.Flat = flatLastHalf(run.Samples)
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			if len(v) > 160 {
				v = v[:160]
			}
			return v
		}
	}
	return ""
}

// flatLastHalf judges each series over the second half of the run, on the
// samples taken at least 30 s after the gateway process they read started
// (a gateway restarted by the SIGKILL fault starts from scratch: its
// warm-up is not a trend), and, when there are at least four, only on the
// readings taken just before a fault: the steady state between faults,
// each in the same phase of the schedule (right after a fault the warm
// containers and aio instances it removed are still being replaced).
// judgedReadings are the readings flatLastHalf judges: the second half's
// readings before a fault (all of the second half's when it has fewer
// than four), outside each gateway process's first 30 s.
func judgedReadings(ss []faultSample) []faultSample {
	if len(ss) == 0 {
		return nil
	}
	end := ss[len(ss)-1].T
	pre := 0
	for _, s := range ss {
		if s.PreFault && s.T >= end/2 {
			pre++
		}
	}
	var out []faultSample
	for _, s := range ss {
		if s.T < end/2 || s.SinceStart < 30 || (pre >= 4 && !s.PreFault) {
			continue
		}
		if s.RSSMB < 0 || s.Goroutines < 0 || s.FDs < 0 {
			continue // a reading that failed
		}
		out = append(out, s)
	}
	return out
}

func flatLastHalf(ss []faultSample) map[string]flatness {
	if len(ss) == 0 {
		return nil
	}
	series := map[string][]float64{}
	for _, s := range judgedReadings(ss) {
		series["rss_mb"] = append(series["rss_mb"], s.RSSMB)
		series["goroutines"] = append(series["goroutines"], float64(s.Goroutines))
		series["fds"] = append(series["fds"], float64(s.FDs))
	}
	out := map[string]flatness{}
	for k, v := range series {
		// judge looks at the second half of what it is given: hand it
		// the half twice so that it judges all of it.
		out[k] = judge(append(slices.Clone(v), v...))
	}
	return out
}

// verdicts are the acceptance checks of issue 21 on this run.
type verdict struct {
	Check  string
	Result string
	Pass   bool
}

func (run *faultRun) verdicts(rounds int) []verdict {
	var vs []verdict
	count := map[string]int{}
	failedFaults := 0
	for _, f := range run.Faults {
		count[f.Name]++
		if f.Err != "" {
			failedFaults++
		}
	}
	// Every fault the machine's executors allow counts, injected or not
	// (a -faults-only run is no acceptance run).
	minN := -1
	for _, f := range allFaults() {
		if f.need != "" && !slices.Contains(run.Executors, f.need) {
			continue
		}
		if n := count[f.name]; minN < 0 || n < minN {
			minN = n
		}
	}
	vs = append(vs, verdict{"every fault injected ≥ " + fmt.Sprint(rounds) + " times", fmt.Sprintf("%d kinds, least %d times; %d injections failed their own check", len(count), minN, failedFaults), minN >= rounds && failedFaults == 0})
	leaks := len(run.LeaksEnd.Leaked) + len(run.LeaksFinal.Leaked)
	for _, f := range run.Faults {
		leaks += len(f.Leaks.Leaked)
	}
	vs = append(vs, verdict{"zero leaks (after each fault, at the end, after stop)", fmt.Sprint(leaks, " leaked items"), leaks == 0})
	miss := len(run.Audit.Missing) + len(run.Audit.Unfinished)
	vs = append(vs, verdict{"zero missing audit records", fmt.Sprintf("%d answered, %d records, %d missing, %d left started, %d fail-closed without a record", run.Audit.Answered, run.Audit.Records, len(run.Audit.Missing), len(run.Audit.Unfinished), run.Audit.FailClosed), miss == 0})
	internal, bad := 0, 0
	for _, e := range run.Errors {
		if !e.Allowed {
			bad += e.Count
			if strings.Contains(e.Answer, "internal") {
				internal += e.Count
			}
		}
	}
	vs = append(vs, verdict{"zero internal errors outside the disk-full faults", fmt.Sprint(internal), internal == 0})
	vs = append(vs, verdict{"every other failure has a stable code and a fault to blame", fmt.Sprint(bad-internal, " unexplained"), bad-internal == 0})
	flat := true
	var fs []string
	for _, k := range []string{"rss_mb", "goroutines", "fds"} {
		f, ok := run.Flat[k]
		flat = flat && ok && f.Flat
		fs = append(fs, fmt.Sprintf("%s %.0f–%.0f (median %.0f)", k, f.Min, f.Max, f.Median))
	}
	if run.CIVariant {
		// Two minutes with a gateway restart in them say nothing about a
		// trend: shown, not judged.
		vs = append(vs, verdict{"RSS, goroutines, fds (not judged in the short variant)", strings.Join(fs, "; "), true})
	} else {
		vs = append(vs, verdict{"RSS, goroutines, fds flat ±10% over the last half", strings.Join(fs, "; "), flat})
	}
	worst := 0.0
	n := 0
	for _, f := range run.Faults {
		if f.Name == faultEngine && f.Err == "" {
			worst = max(worst, f.RecoveryS)
			n++
		}
	}
	vs = append(vs, verdict{"recovery after an engine restart ≤ 5 s", fmt.Sprintf("worst %.2f s over %d restarts", worst, n), n > 0 && worst <= 5})
	return vs
}

func writeFaultRun(o faultOpts, run *faultRun) error {
	b, _ := json.MarshalIndent(run, "", " ")
	if o.jsonOut != "" {
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	vs := run.verdicts(o.rounds)
	pass := true
	for _, v := range vs {
		fmt.Printf("faults: %-58s %-5v %s\n", v.Check, v.Pass, v.Result)
		pass = pass && v.Pass
	}
	if o.out != "" {
		if err := os.MkdirAll(filepath.Join(o.out, "perf"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.out, "perf", "reliability.json"), b, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.out, "reliability.md"), []byte(reliabilityMarkdown(run, vs)), 0o644); err != nil {
			return err
		}
	}
	if !pass {
		return fmt.Errorf("the fault soak failed an acceptance check (see above)")
	}
	return nil
}

func reliabilityMarkdown(run *faultRun, vs []verdict) string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p("# Reliability under faults\n\n")
	p("Generated by `make soak-faults` (bench/faults*.go, issue 21); do not edit by hand.\n\n")
	p("Run of %s at commit %s on %d × %s (kernel %s, %s); %.0f s, %d workers; load average %.2f at the start and %.2f at the end (other work shares this machine).\n\n",
		run.Date.Format(time.RFC3339), run.Commit, run.Machine.NProc, run.Machine.Model, run.Machine.Kernel, run.Machine.GoVer,
		run.DurationS, run.Workers, run.Load[0], run.LoadEnd[0])
	p("Executors exercised: %s.", strings.Join(run.Executors, ", "))
	if len(run.Missing) > 0 {
		p(" Not available here: %v.", run.Missing)
	}
	p("\n\nThe workload, per worker and session, cycles through: SAFE Python (subprocess), workspace write, edit, grep and read, a 3 MB output, a streamed run read to its end, a run that hits its 1 s time limit, a streamed run whose client disconnects after five lines, Python that imports os (docker), a persistent-filesystem run (aio) and a process spawn (HIGH: an approval, answered by an approver bot, then gVisor). The Docker engine is a private one (scripts/dockerd.sh with its own socket, data root and exec root), the data directory and the workspaces are small tmpfs filesystems of their own, so disk full is the kernel's ENOSPC.\n\n")
	p("## Acceptance\n\n| check | result | pass |\n|---|---|---|\n")
	for _, v := range vs {
		p("| %s | %s | %s |\n", v.Check, v.Result, map[bool]string{true: "yes", false: "**no**"}[v.Pass])
	}
	p("\n## Faults\n\nEach fault is injected with the workload running; then the workload pauses and the harness counts leaks (until none is left, at most 20 s: the settle time) and matches the audit log against every answered request.\n\n")
	p("| # | fault | at (s) | took (s) | recovery (s) | settle (s) | leaks | audit missing | what happened |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, f := range run.Faults {
		what := f.Detail
		if f.Err != "" {
			what = "**" + f.Err + "** " + what
		}
		rec := ""
		if f.Name == faultEngine {
			rec = fmt.Sprintf("%.2f", f.RecoveryS)
		}
		p("| %d | %s #%d | %.0f | %.1f | %s | %.1f | %d | %d | %s |\n", i+1, f.Name, f.N, f.AtS, f.DurS, rec, f.SettleS, len(f.Leaks.Leaked), f.Missing+f.Unfinished, mdEscape(what))
	}
	p("\n## Leaks\n\n| when | containers (warm, aio) | gateway children | overlay mounts | netns | temp files | leaked |\n|---|---|---|---|---|---|---|\n")
	rows := []leakCount{}
	for _, f := range run.Faults {
		rows = append(rows, f.Leaks)
	}
	rows = append(rows, run.LeaksFinal, run.LeaksEnd)
	for _, l := range rows {
		p("| %s | %d (%d, %d) | %d | %d | %d | %d | %s |\n", l.At, l.Containers, l.Warm, l.AIO, l.GatewayChildren, l.Overlays, l.NetNS, l.TempFiles, mdEscape(strings.Join(l.Leaked, "; ")))
	}
	p("\nSandbox processes are counted as leaked when they run as a session uid (≥ %d) and no owner (a gateway, a container runtime) is above them. Containers: any not running, a per-run container with no run in flight, a warm container older than the gateway process, or more than the pool bounds; after the gateway stops, any.\n", sandboxUIDBase)
	p("\n## Audit\n\n%d requests answered, %d records in the log; %d answered without a record; %d records left `started` (%d more whose completion hit the full audit disk); %d `interrupted` (runs in flight when the gateway was killed); %d requests cut in flight (no answer, so no request id to match); %d refused without a record while the audit disk was full (fail closed: `internal`, or a denial such as `approval_unavailable` when the approval store shares the disk; the marker runs show nothing ran).\n",
		run.Audit.Answered, run.Audit.Records, len(run.Audit.Missing), len(run.Audit.Unfinished), run.Audit.StartedOnly, run.Audit.Interrupted, run.Audit.Cut, run.Audit.FailClosed)
	for _, m := range run.Audit.Missing {
		p("- missing: %s\n", mdEscape(m))
	}
	p("\n## Errors by stable code\n\n| fault in force | op | answer | count | verdict |\n|---|---|---|---|---|\n")
	for _, e := range run.Errors {
		v := "expected: " + e.Why
		if !e.Allowed {
			v = "**not allowed**: " + e.Why
			if e.Example != "" {
				v += " (" + e.Example + ")"
			}
		}
		p("| %s | %s | %s | %d | %s |\n", orNone(e.Fault), e.Op, e.Answer, e.Count, mdEscape(v))
	}
	if len(run.Unexplained) > 0 {
		p("\nThe first failures not allowed, in order:\n\n")
		for _, r := range run.Unexplained {
			p("- %s %s %s in %s: %d %s %s (fault %q)\n", r.Start.UTC().Format("15:04:05.000"), r.Op, r.RequestID, r.Session, r.Status, r.Code, mdEscape(firstOf(r.Bad, r.Err)), r.Fault)
		}
	}
	p("\n## Resources\n\nSampled every few seconds and just before each fault, always with no request in flight and never during a fault; judged over the second half of the run on the readings taken just before a fault (the steady state between faults; right after one, the warm containers and aio instances it removed are still being replaced), leaving out the first 30 s of each gateway process (the SIGKILL fault restarts it from nothing). Each reading before a fault is taken at the same point of the workload: the gateway first collects its garbage once at rest (the harness reads /metrics, which allocates, until its GC count moves), then the harness waits until it has settled (goroutines, descriptors, containers and child processes unchanged and RSS within 1 MB over a second, at most 15 s). Taken at once, the readings caught the pools at different points of the work that follows a run, and the heap as the last collection under load left it: they swung by a third with nothing growing. What the gateway keeps is in every reading, so a leak still shows.\n\n| series | min | median | max | flat ±10%% |\n|---|---|---|---|---|\n")
	for _, k := range []string{"rss_mb", "goroutines", "fds"} {
		f := run.Flat[k]
		p("| %s | %.1f | %.1f | %.1f | %v |\n", k, f.Min, f.Median, f.Max, f.Flat)
	}
	p("\nThe readings judged, with the occupancy they follow (warm and aio containers, the gateway's child processes and socket descriptors); growth would show as a rise within one gateway process at the same occupancy:\n\n| t (s) | gateway | up (s) | rss MB (anon, file) | goroutines | fds | sockets | warm | aio | children | GCs at rest | settled in (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range judgedReadings(run.Samples) {
		p("| %.0f | #%d | %.0f | %.1f (%.1f, %.1f) | %d | %d | %d | %d | %d | %d | %d | %.1f |\n", r.T, r.Gen, r.SinceStart, r.RSSMB, r.AnonMB, r.FileMB,
			r.Goroutines, r.FDs, r.Sockets, r.Warm, r.AIO, r.Children, r.GCs, r.SettleS)
	}
	p("\n## Requests\n\n| op | n | ok | non-2xx or failed | p50 ms | p95 ms |\n|---|---|---|---|---|---|\n")
	ops := make([]string, 0, len(run.Ops))
	for k := range run.Ops {
		ops = append(ops, k)
	}
	slices.Sort(ops)
	for _, k := range ops {
		s := run.Ops[k]
		p("| %s | %d | %d | %d | %.0f | %.0f |\n", k, s.N, s.OK, s.Errs, s.P50, s.P95)
	}
	p("\nRaw data: [perf/reliability.json](perf/reliability.json).\n")
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func mdEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}
