package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/procfs"
)

// leakCount is one reading of everything the gateway could leave behind,
// taken with no request of the workload in flight. Leaked lists each item
// that should not be there, with why.
type leakCount struct {
	At              string   `json:"at"`
	Containers      int      `json:"containers"`
	Warm            int      `json:"warm_containers"`
	AIO             int      `json:"aio_containers"`
	GatewayChildren int      `json:"gateway_children"`
	Overlays        int      `json:"overlay_mounts"`
	NetNS           int      `json:"netns"`
	TempFiles       int      `json:"temp_files"`
	Leaked          []string `json:"leaked,omitempty"`
}

// soakEnv is where the soak's gateway and engine keep their state.
type soakEnv struct {
	engine   privateEngine
	root     string // the soak's directory
	aioState string
	tmpDir   string // the gateway's TMPDIR
	maxAIO   int
	warmMax  int
	// mounts are the soak's own mounts (tmpfs, the aio state bind).
	mounts []string
	// netnsSeen is when each unused network namespace was first seen.
	netnsSeen map[string]time.Time
}

type containerInfo struct {
	ID, State, Executor, Warm, Instance, Session string
	// Slot is an aio instance's slot (its state directory's name).
	Slot    string
	Created time.Time
}

func (e *soakEnv) containers(ctx context.Context) ([]containerInfo, error) {
	out, err := e.engine.docker(ctx, "ps", "-a", "--no-trunc", "--format",
		`{{.ID}}|{{.State}}|{{.Label "sandgate.executor"}}|{{.Label "sandgate.warm"}}|{{.Label "sandgate.instance"}}|{{.Label "sandgate.session"}}|{{.CreatedAt}}|{{.Label "sandgate.aio.slot"}}`)
	if err != nil {
		return nil, err
	}
	var cs []containerInfo
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) != 8 {
			continue
		}
		t, _ := time.Parse("2006-01-02 15:04:05 -0700 MST", f[6])
		cs = append(cs, containerInfo{ID: f[0][:12], State: f[1], Executor: f[2], Warm: f[3], Instance: f[4], Session: f[5], Created: t, Slot: f[7]})
	}
	return cs, nil
}

// countLeaks reads the leaks. running says whether the gateway is up (then
// warm containers, aio instances and the gateway's own child processes
// are its working set); with it stopped, anything left is a leak.
func (e *soakEnv) countLeaks(ctx context.Context, at string, g *soakGateway, running bool) leakCount {
	l := leakCount{At: at}
	cs, err := e.containers(ctx)
	if err != nil {
		l.Leaked = append(l.Leaked, "engine: "+err.Error())
	}
	var since time.Time
	if running {
		since, _ = g.since()
	}
	live := 0
	for _, c := range cs {
		l.Containers++
		if c.State == "running" {
			live++
		}
		switch {
		case !running:
			l.Leaked = append(l.Leaked, fmt.Sprintf("container %s (%s, %s) after the gateway stopped", c.ID, c.Executor, c.State))
		case c.State != "running":
			l.Leaked = append(l.Leaked, fmt.Sprintf("container %s (%s) in state %s", c.ID, c.Executor, c.State))
		case c.Executor == "aio":
			l.AIO++
		case c.Warm == "":
			l.Leaked = append(l.Leaked, fmt.Sprintf("run container %s (%s) with no run in flight", c.ID, c.Executor))
		case c.Created.Before(since.Add(-time.Second)):
			l.Leaked = append(l.Leaked, fmt.Sprintf("warm container %s (%s) older than the gateway process", c.ID, c.Executor))
		default:
			l.Warm++
		}
	}
	if l.AIO > e.maxAIO {
		l.Leaked = append(l.Leaked, fmt.Sprintf("%d aio containers, max_instances %d", l.AIO, e.maxAIO))
	}
	if l.Warm > 2*e.warmMax { // docker and gvisor each bound their own
		l.Leaked = append(l.Leaked, fmt.Sprintf("%d warm containers, warm_max %d per executor", l.Warm, e.warmMax))
	}
	gwPid := 0
	if running {
		gwPid = g.pid()
	}
	procs := readProcs()
	l.GatewayChildren = procs.descendantsOf(gwPid)
	l.Leaked = append(l.Leaked, procs.orphanSandboxes()...)
	l.Overlays, l.NetNS = e.engineMounts()
	if l.Overlays > live {
		l.Leaked = append(l.Leaked, fmt.Sprintf("%d overlay mounts for %d running containers", l.Overlays, live))
	}
	l.Leaked = append(l.Leaked, e.staleNetNS(ctx, cs)...)
	l.Leaked = append(l.Leaked, e.strayMounts(l.AIO)...)
	ents, _ := os.ReadDir(e.tmpDir)
	l.TempFiles = len(ents)
	for _, d := range ents {
		if running && ownedBy(filepath.Join(e.tmpDir, d.Name()), gwPid) {
			continue // the live gateway's subprocess run directory
		}
		l.Leaked = append(l.Leaked, "temp file "+filepath.Join(e.tmpDir, d.Name()))
	}
	return l
}

// engineMounts counts the private engine's container root filesystems
// and network namespaces.
func (e *soakEnv) engineMounts() (overlays, netns int) {
	for _, m := range mountPoints() {
		if strings.HasPrefix(m, e.engine.dataRoot+"/") && strings.HasSuffix(m, "/merged") {
			overlays++
		}
	}
	ents, _ := os.ReadDir(filepath.Join(e.engine.execRoot, "netns"))
	return overlays, len(ents)
}

// netnsGrace is how long a network namespace may outlive its container:
// the engine (libnetwork) removes those of removed containers in a
// garbage collection every 60 s, not at once.
const netnsGrace = 150 * time.Second

// staleNetNS lists the engine's network namespaces that belong to no
// running container and have been seen for longer than netnsGrace.
func (e *soakEnv) staleNetNS(ctx context.Context, cs []containerInfo) []string {
	inUse := map[string]bool{}
	var ids []string
	for _, c := range cs {
		if c.State == "running" {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) > 0 {
		out, _ := e.engine.docker(ctx, append([]string{"inspect", "-f", "{{.NetworkSettings.SandboxKey}}"}, ids...)...)
		for _, k := range strings.Fields(out) {
			inUse[filepath.Base(k)] = true
		}
	}
	if e.netnsSeen == nil {
		e.netnsSeen = map[string]time.Time{}
	}
	ents, _ := os.ReadDir(filepath.Join(e.engine.execRoot, "netns"))
	now := time.Now()
	seen := map[string]time.Time{}
	var out []string
	for _, d := range ents {
		n := d.Name()
		if inUse[n] {
			continue
		}
		first, ok := e.netnsSeen[n]
		if !ok {
			first = now
		}
		seen[n] = first
		if now.Sub(first) > netnsGrace {
			out = append(out, fmt.Sprintf("network namespace %s unused for %.0fs", n, now.Sub(first).Seconds()))
		}
	}
	e.netnsSeen = seen
	return out
}

// strayMounts are mounts under the soak's directories other than its own
// and the aio pool's per-instance workspace binds (one per live
// instance).
func (e *soakEnv) strayMounts(aioLive int) []string {
	own := map[string]int{}
	for _, m := range e.mounts {
		own[m]++
	}
	var out []string
	for _, m := range mountPoints() {
		if !(strings.HasPrefix(m, e.root+"/") || m == e.aioState || strings.HasPrefix(m, e.aioState+"/")) {
			continue
		}
		if own[m] > 0 {
			own[m]--
			continue
		}
		if strings.HasPrefix(m, e.aioState+"/") && strings.HasSuffix(m, "/ws") && aioLive > 0 {
			aioLive--
			continue
		}
		out = append(out, "mount "+m)
	}
	return out
}

func mountPoints() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			out = append(out, unescapeMount(f[4]))
		}
	}
	return out
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// procTable is /proc at one moment.
type procTable struct {
	parent map[int]int
	comm   map[int]string
	uid    map[int]int
}

func readProcs() procTable {
	t := procTable{parent: map[int]int{}, comm: map[int]string{}, uid: map[int]int{}}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := procfs.ReadStat(pid)
		if err != nil {
			continue
		}
		t.parent[pid], t.comm[pid] = s.PPID, s.Comm
		t.uid[pid] = procUID(pid)
	}
	return t
}

func procUID(pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			if fs := strings.Fields(rest); len(fs) > 0 {
				u, _ := strconv.Atoi(fs[0])
				return u
			}
		}
	}
	return -1
}

func (t procTable) descendantsOf(pid int) int {
	if pid <= 0 {
		return 0
	}
	n := 0
	for p := range t.parent {
		for q, hops := t.parent[p], 0; q > 1 && hops < 64; q, hops = t.parent[q], hops+1 {
			if q == pid {
				n++
				break
			}
		}
	}
	return n
}

// sandboxUIDBase is workspace.DefaultUIDBase: the per-session uids.
const sandboxUIDBase = 2_000_000

// orphanSandboxes lists processes running as a session uid whose ancestry
// reaches init through sandbox processes only: a run, zygote or warm
// interpreter that outlived the gateway that started it. Processes under a
// gateway (any gateway on the machine, including other people's tests)
// or a container runtime are not orphans.
func (t procTable) orphanSandboxes() []string {
	var out []string
	for p, u := range t.uid {
		if u < sandboxUIDBase {
			continue
		}
		orphan := true
		for q, hops := t.parent[p], 0; q > 1 && hops < 64; q, hops = t.parent[q], hops+1 {
			if t.uid[q] < sandboxUIDBase {
				orphan = false // an owner (gateway, test binary, containerd-shim) still holds it
				break
			}
		}
		if orphan {
			out = append(out, fmt.Sprintf("sandbox process %d (%s, uid %d) with no owner", p, t.comm[p], u))
		}
	}
	return out
}

// auditCheck is the audit accounting at one moment.
type auditCheck struct {
	Records     int      `json:"records"`
	Answered    int      `json:"answered"`
	Missing     []string `json:"missing,omitempty"`
	FailClosed  int      `json:"fail_closed"`
	Unfinished  []string `json:"unfinished,omitempty"`
	StartedOnly int      `json:"started_only_disk_full"`
	Interrupted int      `json:"interrupted"`
	Cut         int      `json:"cut_in_flight"`
}

// auditRecord is what the soak reads of one audit record.
type auditRecord struct {
	RequestID string `json:"request_id"`
	Outcome   string `json:"outcome"`
	Reasons   []struct {
		Code string `json:"code"`
	} `json:"reasons"`
}

// eachAuditRecord pages through the audit log (admin token), filtered by
// query ("" or "session_id=..."), calling f on each record until f returns
// false.
func eachAuditRecord(ctx context.Context, g *soakGateway, query string, f func(auditRecord) bool) error {
	for cursor := 0; ; {
		path := "/v1/audit?limit=1000"
		if query != "" {
			path += "&" + query
		}
		if cursor > 0 {
			path += "&cursor=" + strconv.Itoa(cursor)
		}
		a := g.call(ctx, adminToken, "GET", path, "", nil, nil)
		if !a.ok() {
			return fmt.Errorf("audit query: %d %s %v", a.Status, a.Code, a.Err)
		}
		var page struct {
			Records []auditRecord `json:"records"`
			Next    int64         `json:"next_cursor"`
		}
		if err := json.Unmarshal(a.Body, &page); err != nil {
			return err
		}
		for _, r := range page.Records {
			if !f(r) {
				return nil
			}
		}
		if page.Next == 0 {
			return nil
		}
		cursor = int(page.Next)
	}
}

// auditRecords reads the whole audit log: each request id's outcome.
func auditRecords(ctx context.Context, g *soakGateway) (map[string]string, error) {
	out := map[string]string{}
	err := eachAuditRecord(ctx, g, "", func(r auditRecord) bool {
		out[r.RequestID] = r.Outcome
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkAudit matches every answered request against the audit log. An
// answer without a record is allowed only when it is a refusal while the
// audit database's disk was full (fail closed); a 2xx never.
func checkAudit(ctx context.Context, g *soakGateway, recs []opRecord) (auditCheck, error) {
	byID, err := auditRecords(ctx, g)
	if err != nil {
		return auditCheck{}, err
	}
	c := auditCheck{Records: len(byID)}
	faultOf := map[string]string{}
	for _, r := range recs {
		if r.RequestID != "" {
			faultOf[r.RequestID] = r.Fault
		}
	}
	for id, outcome := range byID {
		switch outcome {
		case "started":
			if diskFaults[faultOf[id]] {
				// Its completion could not be written: the started
				// record stands (and becomes interrupted at the next
				// start), the run is not unrecorded.
				c.StartedOnly++
				continue
			}
			c.Unfinished = append(c.Unfinished, id)
		case "interrupted":
			c.Interrupted++
		}
	}
	for _, r := range recs {
		if r.RequestID == "" {
			if r.Err != "" {
				c.Cut++
			}
			continue
		}
		c.Answered++
		if _, ok := byID[r.RequestID]; ok {
			continue
		}
		if r.Status/100 != 2 && diskFaults[r.Fault] {
			// Refused (internal, or a denial such as
			// approval_unavailable) while the audit disk was full:
			// nothing ran or changed, and there was no room for the
			// record of the refusal.
			c.FailClosed++
			continue
		}
		if r.Streamed && r.CutBeforeOutput && r.Fault == "gateway_sigkill" {
			// The stream had its decision when the gateway was killed,
			// before the run's write-ahead record: nothing ran (a run that
			// started has its record before it starts), so nothing is
			// unrecorded.
			c.Cut++
			continue
		}
		c.Missing = append(c.Missing, fmt.Sprintf("%s %s (%d %s, fault %q)", r.Op, r.RequestID, r.Status, r.Code, r.Fault))
	}
	return c, nil
}

// ownedBy reports whether dir is a subprocess executor's run directory
// whose owner file names pid.
func ownedBy(dir string, pid int) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false
	}
	var owner int
	_, err = fmt.Sscan(string(b), &owner)
	return err == nil && owner == pid
}
