package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/events"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// The sessions scenarios (issue 27's benchmarks), each against a baseline
// measured in the same run:
//
//   - forward: GET /v1/sessions/{id} (and an execute of `echo hi`) sent
//     to the session's owner replica directly against the same request
//     sent to a non-owner replica, which forwards it; three replicas on
//     PostgreSQL.
//   - open: the manager's Open, in this process, on SQLite: the first
//     open of a new session (it writes the record), the open of one this
//     manager serves, and the open of one a restarted manager reads from
//     its record; against one SQLite point write and one point read on
//     the same database.
//   - events: a run's run.finished webhook, from the run's response
//     reaching the client to the webhook reaching a loopback receiver
//     that verifies its Standard Webhooks signature; against the run's
//     own round trip.

// Labels of the sessions scenarios' sides.
const (
	fwdViaLabel      = "gateway via a non-owner replica"
	fwdDirectLabel   = "owner replica directly"
	openNewLabel     = "Open, new session (writes its record)"
	openCachedLabel  = "Open, existing session served here"
	openRecordLabel  = "Open, existing session after a restart (reads its record)"
	pointWriteLabel  = "SQLite point write (one row, one transaction)"
	pointReadLabel   = "SQLite point read (one row by primary key)"
	eventsRunLabel   = "run_code round trip (the run itself)"
	eventsDelivLabel = "response to run.finished webhook"
)

// Issue 27's targets.
const (
	forwardTargetMS = 2.0
	openTargetMS    = 0.5
	eventsTargetMS  = 200.0
	eventsMinN      = 200
)

// sessionsResult is the three figures; a part that did not run is nil.
type sessionsResult struct {
	// Forward is GET /v1/sessions/{id}: the figure the target is judged
	// on (the request does almost nothing else, so the difference is the
	// forwarding). ForwardExec is an execute of `echo hi`, for scale.
	Forward     *abResult      `json:"forward,omitempty"`
	ForwardExec *abResult      `json:"forward_execute,omitempty"`
	Open        *abResult      `json:"open,omitempty"`
	OpenSync    string         `json:"open_sqlite_synchronous,omitempty"`
	Events      *eventsResult  `json:"events,omitempty"`
	Replicas    int            `json:"replicas,omitempty"`
	OwnerSeen   map[string]int `json:"forward_served_by,omitempty"`
}

// eventsResult is the delivery latency of run.finished webhooks.
type eventsResult struct {
	// Run is the run's round trip (request sent to response read);
	// Delivery from the response read to the webhook's arrival (negative
	// when the webhook came first).
	Run      stats `json:"run"`
	Delivery stats `json:"delivery"`
	// Early counts webhooks that arrived before the run's response.
	Early int `json:"arrived_before_response"`
	// Webhooks is every delivery received (all event types), Duplicates
	// those with a webhook-id already seen, BadSignatures those refused.
	Webhooks      int `json:"webhooks_received"`
	Duplicates    int `json:"duplicates"`
	BadSignatures int `json:"bad_signatures"`
}

func (o opts) wantSessions(part string) bool { return o.want("sessions") || o.want("sessions-"+part) }

// runSessions runs the parts of the sessions scenario o selects; a part
// that cannot run is recorded as unavailable and the others still run.
func runSessions(ctx context.Context, o opts, fail func(string, error)) *sessionsResult {
	var res sessionsResult
	if o.wantSessions("open") {
		r, syncMode, err := scenarioOpen(ctx, o)
		if err != nil {
			fail("sessions-open", err)
		} else {
			res.Open, res.OpenSync = &r, syncMode
		}
	}
	var dir, bin string
	if o.wantSessions("forward") || o.wantSessions("events") {
		var err error
		if dir, bin, err = buildGateway(ctx); err != nil {
			for _, part := range []string{"forward", "events"} {
				if o.wantSessions(part) {
					fail("sessions-"+part, err)
				}
			}
			return sessionsOrNil(&res)
		}
		defer os.RemoveAll(dir)
	}
	if o.wantSessions("forward") {
		if err := scenarioForward(ctx, o, dir, bin, &res); err != nil {
			fail("sessions-forward", err)
		}
	}
	if o.wantSessions("events") {
		r, err := scenarioEvents(ctx, o, dir, bin)
		if err != nil {
			fail("sessions-events", err)
		} else {
			res.Events = &r
		}
	}
	return sessionsOrNil(&res)
}

// sessionsOrNil is r, or nil when no part of it ran.
func sessionsOrNil(r *sessionsResult) *sessionsResult {
	if r.Open == nil && r.Forward == nil && r.Events == nil {
		return nil
	}
	return r
}

// --- forwarding overhead ---

// scenarioForward starts three replicas on PostgreSQL, creates a session
// through the first (its owner) and times the same requests sent to it
// directly and to the other two (round-robin), which forward them.
func scenarioForward(ctx context.Context, o opts, dir, bin string, res *sessionsResult) error {
	dsn, stopPG, err := benchPostgres(ctx)
	if err != nil {
		return err
	}
	defer stopPG()
	runDir, err := os.MkdirTemp(dir, "forward")
	if err != nil {
		return err
	}
	if err := os.Chmod(runDir, 0o711); err != nil {
		return err
	}
	schema := "bench_" + randHex()
	if err := pgExec(ctx, dsn, "CREATE SCHEMA "+schema); err != nil {
		return err
	}
	defer func() { _ = pgExec(context.WithoutCancel(ctx), dsn, "DROP SCHEMA "+schema+" CASCADE") }()
	yaml := "executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\n" +
		"browser: {enabled: false}\nmcp: {enabled: false}\nstorage: {driver: postgres}\n"
	const replicas = 3
	var procs []*gatewayProc
	defer func() {
		for _, g := range procs {
			g.stopKeep()
		}
	}()
	for i := range replicas {
		g, err := launchGatewayEnv(runDir, bin, yaml, fmt.Sprintf("sandgate-bench-forward-%d.log", i),
			[]string{"SANDGATE_STORAGE_DSN=" + dsn + " search_path=" + schema, fmt.Sprintf("SANDGATE_REPLICA=r%d", i)})
		if err != nil {
			return err
		}
		procs = append(procs, g)
	}
	res.Replicas = replicas
	owner := procs[0]
	// One client for both sides: the same pool of kept-alive connections.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	session := "fwd-" + randHex()
	if _, err := request(ctx, client, owner.base, "POST", "/v1/sessions", jsonBody(map[string]any{"id": session})); err != nil {
		return fmt.Errorf("create the session on r0: %w", err)
	}
	// Every replica must see r0 as the owner: a non-owner that answered
	// itself would measure nothing.
	res.OwnerSeen = map[string]int{}
	for _, g := range procs {
		raw, err := request(ctx, client, g.base, "GET", "/v1/sessions/"+session, nil)
		if err != nil {
			return err
		}
		var info struct {
			Placement struct {
				Replica string `json:"replica"`
			} `json:"placement"`
		}
		if err := json.Unmarshal(raw, &info); err != nil {
			return err
		}
		if info.Placement.Replica != "r0" {
			return fmt.Errorf("GET through %s: the session is placed on %q, not r0: %.300s", g.base, info.Placement.Replica, raw)
		}
		res.OwnerSeen[info.Placement.Replica]++
	}
	var rr atomic.Uint64
	nonOwner := func() string { return procs[1+rr.Add(1)%(replicas-1)].base }
	get := func(base func() string) side {
		return timed(func(ctx context.Context) error {
			_, err := request(ctx, client, base(), "GET", "/v1/sessions/"+session, nil)
			return err
		})
	}
	execBody := jsonBody(map[string]any{"command": "echo hi"})
	execute := func(base func() string) side {
		return timed(func(ctx context.Context) error {
			raw, err := request(ctx, client, base(), "POST", "/v1/sessions/"+session+"/execute", execBody)
			if err != nil {
				return err
			}
			if !bytes.Contains(raw, []byte(`"output":"hi\n"`)) {
				return fmt.Errorf("execute: %.300s", raw)
			}
			return nil
		})
	}
	direct := func() string { return owner.base }
	getVia, getDirect, execVia, execDirect := get(nonOwner), get(direct), execute(nonOwner), execute(direct)
	for range 20 { // warm-up: connections both ways, the session's interpreter
		for _, s := range []side{getVia, getDirect, execVia, execDirect} {
			if _, err := s(ctx); err != nil {
				return err
			}
		}
	}
	r, err := ab(ctx, "forward", "GET /v1/sessions/{id}: through a non-owner replica vs the owner directly (3 replicas, PostgreSQL)",
		[]named{{label: fwdViaLabel, s: getVia}, {label: fwdDirectLabel, s: getDirect}}, 1, o.forwardN, o.block)
	if err != nil {
		return err
	}
	r.print(os.Stdout)
	res.Forward = &r
	r2, err := ab(ctx, "forward-execute", "execute `echo hi`: through a non-owner replica vs the owner directly (3 replicas, PostgreSQL)",
		[]named{{label: fwdViaLabel, s: execVia}, {label: fwdDirectLabel, s: execDirect}}, 1, max(50, o.forwardN/4), o.block)
	if err != nil {
		return err
	}
	r2.print(os.Stdout)
	res.ForwardExec = &r2
	printDelta(r)
	printDelta(r2)
	return nil
}

func printDelta(r abResult) {
	via, _ := r.side(fwdViaLabel)
	dir, _ := r.side(fwdDirectLabel)
	fmt.Printf("  forwarding adds %+.2f ms at p50, %+.2f ms at p95\n", via.Stats.P50-dir.Stats.P50, via.Stats.P95-dir.Stats.P95)
}

// request sends one request with the agent token to base and returns the
// 2xx body.
func request(ctx context.Context, c *http.Client, base, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+agentToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		return raw, &httpError{Status: res.StatusCode, Body: string(raw)}
	}
	return raw, nil
}

// --- session open ---

// benchDecider stands in for the policy: Open never asks it.
type benchDecider struct{}

func (benchDecider) Decide(context.Context, policy.Input) policy.Decision { return policy.Decision{} }

// openSync is the gateway's default audit.synchronous: each commit is
// fsynced, the first open's record included.
const openSync = "full"

// scenarioOpen times the manager's Open in this process, wired as the
// gateway wires it on SQLite (the audit database, with the gateway's
// default synchronous=full, holds the session records, and the event
// log on it receives session.created), against a point write and a
// point read on the same database.
func scenarioOpen(ctx context.Context, o opts) (abResult, string, error) {
	dir, err := os.MkdirTemp("", "sgbench-open")
	if err != nil {
		return abResult{}, "", err
	}
	defer os.RemoveAll(dir)
	db, err := audit.Open(ctx, filepath.Join(dir, "audit.db"), audit.Options{Synchronous: openSync})
	if err != nil {
		return abResult{}, "", err
	}
	defer db.Close()
	evlog, err := events.Open(ctx, db, events.Config{}, nil)
	if err != nil {
		return abResult{}, "", err
	}
	defer evlog.Close()
	ws, err := workspace.New(filepath.Join(dir, "ws"), workspace.Options{})
	if err != nil {
		return abResult{}, "", err
	}
	newManager := func() (*manager.Manager, error) {
		m, err := manager.New(manager.Config{Mode: "STRICT", Replica: audit.DefaultReplica},
			manager.Deps{Assessor: risk.NewAssessor(nil, nil), Policy: benchDecider{}, Workspaces: ws, Audit: db,
				Sessions: db, Events: manager.LogSink{Log: evlog}})
		if err != nil {
			return nil, err
		}
		return m, m.Start(ctx)
	}
	// m serves the sessions; restarted is the same gateway after a
	// restart (same replica name, same database, nothing cached), which
	// opens each of its sessions once from the record m wrote.
	m, err := newManager()
	if err != nil {
		return abResult{}, "", err
	}
	restarted, err := newManager()
	if err != nil {
		return abResult{}, "", err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = m.Close(cctx)
		_ = restarted.Close(cctx)
	}()
	p := manager.Principal{Role: "agent", Name: "bench", Tenant: "bench"}
	prefix := "open-" + randHex()
	open := func(m *manager.Manager, id string) error {
		s, owner, err := m.Open(ctx, p, id, manager.OpenOptions{FrontEnd: "rest"})
		if err == nil && (s == nil || !owner.Local) {
			err = fmt.Errorf("open %s: not served here", id)
		}
		return err
	}
	var seqNew, seqCached, seqRecord, seqWrite, seqRead atomic.Int64
	const cachedSessions = 64
	for i := range cachedSessions {
		if err := open(m, fmt.Sprintf("%s-c%d", prefix, i)); err != nil {
			return abResult{}, "", err
		}
	}
	// The records the restarted manager opens: one per sample, written
	// before the measurement (untimed), as a restart would find them.
	total := o.openN + 20
	for i := range total {
		if err := open(m, fmt.Sprintf("%s-r%d", prefix, i)); err != nil {
			return abResult{}, "", err
		}
	}
	if err := db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE bench_points (k TEXT PRIMARY KEY, v TEXT NOT NULL) STRICT`)
		return err
	}); err != nil {
		return abResult{}, "", err
	}
	// A row the size of a session record's JSON columns.
	val := strings.Repeat("x", 256)
	newSide := timed(func(context.Context) error { return open(m, fmt.Sprintf("%s-n%d", prefix, seqNew.Add(1))) })
	cachedSide := timed(func(context.Context) error {
		return open(m, fmt.Sprintf("%s-c%d", prefix, seqCached.Add(1)%cachedSessions))
	})
	recordSide := timed(func(context.Context) error {
		return open(restarted, fmt.Sprintf("%s-r%d", prefix, seqRecord.Add(1)-1))
	})
	writeSide := timed(func(ctx context.Context) error {
		k := fmt.Sprintf("%s-w%d", prefix, seqWrite.Add(1))
		return db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO bench_points (k, v) VALUES (?, ?)`, k, val)
			return err
		})
	})
	// The point read selects a whole session record by its key, as Open
	// does for a session it does not hold.
	readSide := timed(func(ctx context.Context) error {
		key := workspace.Key(p.Tenant, fmt.Sprintf("%s-r%d", prefix, seqRead.Add(1)%int64(total)))
		rows, err := db.DB().QueryContext(ctx, `SELECT * FROM session_records WHERE key = ?`, key)
		if err != nil {
			return err
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			return err
		}
		if !rows.Next() {
			return fmt.Errorf("no record %s", key)
		}
		dest := make([]any, len(cols))
		for i := range dest {
			dest[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		return rows.Err()
	})
	for range 20 { // warm-up: statements, connections, pages
		for _, s := range []side{newSide, writeSide, cachedSide, recordSide, readSide} {
			if _, err := s(ctx); err != nil {
				return abResult{}, "", err
			}
		}
	}
	r, err := ab(ctx, "open", "session open, in process, SQLite: the manager's Open vs one SQLite point write and read on the same database",
		[]named{{label: openNewLabel, s: newSide}, {label: pointWriteLabel, s: writeSide},
			{label: openCachedLabel, s: cachedSide}, {label: openRecordLabel, s: recordSide}, {label: pointReadLabel, s: readSide}},
		1, o.openN, o.block)
	if err != nil {
		return abResult{}, "", err
	}
	r.print(os.Stdout)
	return r, openSync, nil
}

// --- event delivery ---

// hookReceiver is a loopback webhook endpoint that verifies each
// delivery's Standard Webhooks signature and notes when each run's
// run.finished arrived.
type hookReceiver struct {
	key     []byte
	arrived chan struct{}

	mu       sync.Mutex
	finished map[string]time.Time // request_id: first arrival
	seen     map[string]bool      // webhook-id
	total    int
	dups     int
	bad      int
	firstBad string
}

func newHookReceiver(key []byte) *hookReceiver {
	return &hookReceiver{key: key, arrived: make(chan struct{}, 1), finished: map[string]time.Time{}, seen: map[string]bool{}}
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	id := r.Header.Get("webhook-id")
	if err := verifyWebhook(h.key, id, r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body, time.Now()); err != nil {
		h.mu.Lock()
		h.bad++
		if h.firstBad == "" {
			h.firstBad = err.Error()
		}
		h.mu.Unlock()
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			RequestID string `json:"request_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.total++
	dup := h.seen[id]
	h.seen[id] = true
	if dup {
		h.dups++
	} else if ev.Type == events.RunFinished && ev.Data.RequestID != "" {
		h.finished[ev.Data.RequestID] = at
	}
	h.mu.Unlock()
	select {
	case h.arrived <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

// wait returns when the run.finished of requestID arrived.
func (h *hookReceiver) wait(ctx context.Context, requestID string, limit time.Duration) (time.Time, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		h.mu.Lock()
		at, ok := h.finished[requestID]
		h.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-h.arrived:
		case <-t.C:
			return time.Time{}, fmt.Errorf("no run.finished webhook for request %s within %s", requestID, limit)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// webhookTolerance is how far a webhook-timestamp may be from the
// receiver's clock (Standard Webhooks' reference libraries: 5 minutes).
const webhookTolerance = 5 * time.Minute

// verifyWebhook checks one delivery as the Standard Webhooks
// specification says: the signature header lists space-delimited
// "v1,<base64>" entries, one of which must be the HMAC-SHA256, keyed by
// the secret's bytes, of "{webhook-id}.{webhook-timestamp}.{body}"; and
// the timestamp must be within webhookTolerance of now.
func verifyWebhook(key []byte, id, timestamp, signature string, body []byte, now time.Time) error {
	if id == "" || timestamp == "" || signature == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not a number", timestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > webhookTolerance || d < -webhookTolerance {
		return fmt.Errorf("webhook-timestamp %d is %s from now", ts, d.Round(time.Second))
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(signature) {
		v, sig, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no v1 signature matches")
}

// scenarioEvents starts a gateway on SQLite whose one webhook (every
// tenant, every event type) is a receiver in this process, and runs
// SAFE print(1) one at a time, each after the previous run's
// run.finished arrived, timing the run and then its webhook.
func scenarioEvents(ctx context.Context, o opts, dir, bin string) (eventsResult, error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	rcv := newHookReceiver(key)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return eventsResult{}, err
	}
	srv := &http.Server{Handler: rcv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	runDir, err := os.MkdirTemp(dir, "events")
	if err != nil {
		return eventsResult{}, err
	}
	if err := os.Chmod(runDir, 0o711); err != nil {
		return eventsResult{}, err
	}
	yaml := "executors: {docker: {enabled: false}, gvisor: {enabled: false}, aio: {enabled: false}}\n" +
		"browser: {enabled: false}\nmcp: {enabled: false}\n" +
		fmt.Sprintf("events:\n  webhooks:\n    - url: http://%s/hook\n      secret: whsec_%s\n", ln.Addr(), base64.StdEncoding.EncodeToString(key))
	g, err := launchGateway(runDir, bin, yaml, "sandgate-bench-events.log")
	if err != nil {
		return eventsResult{}, err
	}
	defer g.stop()
	session := "events-" + randHex()
	body := jsonBody(map[string]any{"code": "print(1)", "language": "python"})
	once := func(ctx context.Context) (rt, deliv time.Duration, err error) {
		t0 := time.Now()
		raw, err := g.do(ctx, "POST", "/v1/sessions/"+session+"/run_code", "application/json", body)
		t1 := time.Now()
		if err != nil {
			return 0, 0, err
		}
		var out struct {
			Success     bool   `json:"success"`
			Stdout      string `json:"stdout"`
			SandboxType string `json:"sandbox_type"`
			RequestID   string `json:"request_id"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return 0, 0, err
		}
		if !out.Success || out.Stdout != "1\n" || out.RequestID == "" {
			return 0, 0, fmt.Errorf("run_code: %.300s", raw)
		}
		at, err := rcv.wait(ctx, out.RequestID, 10*time.Second)
		if err != nil {
			return 0, 0, err
		}
		return t1.Sub(t0), at.Sub(t1), nil
	}
	for range 10 { // warm-up: the session's zygote, the connections both ways
		if _, _, err := once(ctx); err != nil {
			return eventsResult{}, err
		}
	}
	var runs, delivs []time.Duration
	early := 0
	start := time.Now()
	for range o.eventsN {
		rt, d, err := once(ctx)
		if err != nil {
			return eventsResult{}, err
		}
		runs, delivs = append(runs, rt), append(delivs, d)
		if d < 0 {
			early++
		}
	}
	wall := time.Since(start)
	rcv.mu.Lock()
	r := eventsResult{Run: summarize(runs, wall), Delivery: summarize(delivs, 0), Early: early,
		Webhooks: rcv.total, Duplicates: rcv.dups, BadSignatures: rcv.bad}
	firstBad := rcv.firstBad
	rcv.mu.Unlock()
	if r.BadSignatures > 0 {
		return r, fmt.Errorf("%d deliveries failed signature verification: %s", r.BadSignatures, firstBad)
	}
	fmt.Printf("event delivery: run.finished webhook after the run's response, %d runs one at a time\n", r.Delivery.N)
	fmt.Printf("  %-34s p50 %8.2f ms  p95 %8.2f ms  p99 %8.2f ms\n", eventsRunLabel, r.Run.P50, r.Run.P95, r.Run.P99)
	fmt.Printf("  %-34s p50 %8.2f ms  p95 %8.2f ms  p99 %8.2f ms\n", eventsDelivLabel, r.Delivery.P50, r.Delivery.P95, r.Delivery.P99)
	fmt.Printf("  %d webhooks received, all signatures verified, %d duplicates, %d arrived before the response\n", r.Webhooks, r.Duplicates, r.Early)
	return r, nil
}

// --- report ---

// abResults are the sessions scenarios' A/B results, for the charts.
func (r *sessionsResult) abResults() []abResult {
	var out []abResult
	if r == nil {
		return nil
	}
	for _, x := range []*abResult{r.Forward, r.ForwardExec, r.Open} {
		if x != nil {
			out = append(out, *x)
		}
	}
	return out
}

// eventsChartName is the events scenario's latency chart.
const eventsChartName = "latency-events.svg"

// sessionsCharts draws the event delivery chart (the A/B results are
// drawn with the others).
func sessionsCharts(dir string, r *sessionsResult) error {
	if r == nil || r.Events == nil {
		return nil
	}
	e := r.Events
	p, err := latencyPlot("run.finished webhook delivery, concurrency 1",
		[]string{fmt.Sprintf("%s (p50 %s)", eventsRunLabel, ms(e.Run.P50)), fmt.Sprintf("%s (p50 %s)", eventsDelivLabel, ms(e.Delivery.P50))},
		[][]float64{e.Run.LatMS, e.Delivery.LatMS})
	if err != nil {
		return err
	}
	return save(p, filepath.Join(dir, eventsChartName), 16*vg.Centimeter, 10*vg.Centimeter)
}

// sessionsTargets are issue 27's three targets and the README's line.
func sessionsTargets(rep *report) ([]target, []string) {
	const (
		fwdName    = "issue 27: a request through a non-owner replica ≤ the owner + 2 ms (p50)"
		openName   = "issue 27: session open p50 ≤ 0.5 ms"
		eventsName = "issue 27: event delivery, run's end to webhook arrival, p99 ≤ 200 ms"
	)
	var ts []target
	var parts []string
	r := rep.Sessions
	if r != nil && r.Forward != nil {
		via, _ := r.Forward.side(fwdViaLabel)
		dir, _ := r.Forward.side(fwdDirectLabel)
		d := via.Stats.P50 - dir.Stats.P50
		t := target{Name: fwdName, Met: d <= forwardTargetMS,
			Measured: fmt.Sprintf("GET /v1/sessions/{id}: %s via a non-owner, %s direct: %+.2f ms", ms(via.Stats.P50), ms(dir.Stats.P50), d)}
		if !t.Met {
			t.Reason = fmt.Sprintf("forwarding adds %.2f ms at p50", d)
		}
		ts = append(ts, t)
		parts = append(parts, fmt.Sprintf("a request through a non-owner replica %+.2f ms at p50 over the owner (%s vs %s)", d, ms(via.Stats.P50), ms(dir.Stats.P50)))
	} else {
		ts = append(ts, target{Name: fwdName, Missing: true, Reason: unavailable(rep, "sessions-forward")})
	}
	if r != nil && r.Open != nil {
		nw, _ := r.Open.side(openNewLabel)
		cached, _ := r.Open.side(openCachedLabel)
		rec, _ := r.Open.side(openRecordLabel)
		worst := max(nw.Stats.P50, cached.Stats.P50, rec.Stats.P50)
		t := target{Name: openName, Met: worst <= openTargetMS,
			Measured: fmt.Sprintf("new %s, served here %s, after a restart %s (SQLite, synchronous=%s)",
				ms(nw.Stats.P50), ms(cached.Stats.P50), ms(rec.Stats.P50), r.OpenSync)}
		if !t.Met {
			w, _ := r.Open.side(pointWriteLabel)
			t.Reason = fmt.Sprintf("p50 up to %s; one SQLite point write alone takes %s", ms(worst), ms(w.Stats.P50))
		}
		ts = append(ts, t)
		parts = append(parts, fmt.Sprintf("opening a new session %s and an existing one %s at p50 (in process, SQLite)", ms(nw.Stats.P50), ms(cached.Stats.P50)))
	} else {
		ts = append(ts, target{Name: openName, Missing: true, Reason: unavailable(rep, "sessions-open")})
	}
	if r != nil && r.Events != nil {
		e := r.Events
		t := target{Name: eventsName, Met: e.Delivery.P99 <= eventsTargetMS && e.Delivery.N >= eventsMinN,
			Measured: fmt.Sprintf("p50 %s, p95 %s, p99 %s (n=%d; the run's round trip p50 %s)",
				ms(e.Delivery.P50), ms(e.Delivery.P95), ms(e.Delivery.P99), e.Delivery.N, ms(e.Run.P50))}
		switch {
		case e.Delivery.N < eventsMinN:
			t.Reason = fmt.Sprintf("n=%d, fewer than %d runs", e.Delivery.N, eventsMinN)
		case !t.Met:
			t.Reason = fmt.Sprintf("p99 %s", ms(e.Delivery.P99))
		}
		ts = append(ts, t)
		parts = append(parts, fmt.Sprintf("a run's run.finished webhook arrives %s after its response at p99 (p50 %s)", ms(e.Delivery.P99), ms(e.Delivery.P50)))
	} else {
		ts = append(ts, target{Name: eventsName, Missing: true, Reason: unavailable(rep, "sessions-events")})
	}
	var lines []string
	if len(parts) > 0 {
		lines = append(lines, "Sessions (issue 27): "+strings.Join(parts, "; ")+".")
	}
	return ts, lines
}

// sessionsMarkdown is the report's section on the sessions scenarios.
func sessionsMarkdown(r *sessionsResult) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	table := func(res abResult, base func(label string) string) {
		p("| side | p50 | p95 | p99 | req/s | n | p50 against its baseline |\n|---|---|---|---|---|---|---|\n")
		for _, s := range res.Sides {
			cmp := "baseline"
			if bl := base(s.Label); bl != "" {
				if b, ok := res.side(bl); ok {
					cmp = fmt.Sprintf("%.2f×, %+.3f ms (against %s)", s.Stats.P50/b.Stats.P50, s.Stats.P50-b.Stats.P50, bl)
				}
			}
			p("| %s | %s | %s | %s | %.1f | %d | %s |\n", s.Label, ms(s.Stats.P50), ms(s.Stats.P95), ms(s.Stats.P99), s.Stats.RPS, s.Stats.N, cmp)
		}
		p("\n![latency distribution](perf/%s)\n\n", latencyChartName(res))
	}
	fwdBase := func(label string) string {
		if label == fwdViaLabel {
			return fwdDirectLabel
		}
		return ""
	}
	p("## Sessions (issue 27)\n\n")
	if r.Forward != nil {
		p("### Forwarding to the owner replica\n\nThree replicas on PostgreSQL, one session created through the first (its owner). The same request is sent to the owner directly and to one of the two other replicas (alternately), which forwards it; the two sides alternate in blocks of the same run. `GET /v1/sessions/{id}` is the figure the target is judged on: it does almost nothing on the owner, so the difference is the forwarding itself (the non-owner authenticates the caller, reads the session's owner from PostgreSQL, signs the hop and proxies the request; the owner verifies the hop and reads the owner row as for any request). An `execute` of `echo hi` (SAFE, the subprocess executor) is shown for scale.\n\n")
		for _, x := range []*abResult{r.Forward, r.ForwardExec} {
			if x == nil {
				continue
			}
			p("**%s**, concurrency %d.\n\n", x.Name, x.Concurrency)
			table(*x, fwdBase)
		}
	}
	if r.Open != nil {
		p("### Session open\n\nThe manager's `Open` in the bench process, wired as the gateway wires it on SQLite: session records in the audit database (synchronous=%s, the gateway's default: every commit is fsynced) and `session.created` published to the event log on the same database. *New* opens a session that does not exist (it writes its record in one transaction); *served here* opens one this manager already serves (what every request of a live session pays); *after a restart* opens, on a second manager over the same database (the same gateway restarted), a session whose record the first wrote, once each (it reads the record). The baselines are one SQLite transaction inserting one row, and one read of a session record by its key, on the same database handle. All five alternate in blocks.\n\n", r.OpenSync)
		openBase := func(label string) string {
			switch label {
			case openNewLabel:
				return pointWriteLabel
			case openCachedLabel, openRecordLabel:
				return pointReadLabel
			}
			return ""
		}
		p("**%s**, concurrency %d.\n\n", r.Open.Name, r.Open.Concurrency)
		table(*r.Open, openBase)
	}
	if e := r.Events; e != nil {
		p("### Event delivery\n\nOne gateway on SQLite with one webhook (every tenant, every event type) pointing at a receiver in the bench process on loopback, which verifies every delivery's Standard Webhooks signature (HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}`, timestamp within 5 minutes) before it answers 204. `run_code` of `print(1)` (SAFE, the subprocess executor) in one session, one at a time, each sent once the previous run's `run.finished` arrived; latency is from the run's response read by the client to its `run.finished` (matched by `request_id`) reaching the receiver, negative when the webhook came first. Each run also produces `run.started`, delivered in order before it. The baseline is the run's own round trip.\n\n")
		p("| | p50 | p95 | p99 | n |\n|---|---|---|---|---|\n")
		p("| %s | %s | %s | %s | %d |\n", eventsRunLabel, ms(e.Run.P50), ms(e.Run.P95), ms(e.Run.P99), e.Run.N)
		p("| %s | %s | %s | %s | %d |\n", eventsDelivLabel, ms(e.Delivery.P50), ms(e.Delivery.P95), ms(e.Delivery.P99), e.Delivery.N)
		p("\nDelivery p50 is %.2f× the run's own round trip. %d deliveries received, every signature verified, %d duplicates; %d of the %d webhooks arrived before the run's response.\n\n![event delivery](perf/%s)\n\n",
			e.Delivery.P50/e.Run.P50, e.Webhooks, e.Duplicates, e.Early, e.Delivery.N, eventsChartName)
	}
	return b.String()
}
