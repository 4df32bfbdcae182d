package confirm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The load shape of the issue: 200 approvals pending at once, 20 approvers
// connected. Every approver must receive every approval.requested and
// approval.resolved event; the benchmark reports the delivery latency
// (from the hub stamping the event to the client decoding it) and the heap
// left once everything is resolved.
const (
	loadPending   = 200
	loadApprovers = 20
)

// loadClient is a lean approver: it records each event's latency and counts
// events by type.
type loadClient struct {
	ws   *websocket.Conn
	mu   sync.Mutex
	cond *sync.Cond
	lat  []time.Duration
	n    map[string]int
	ids  []string // approval ids in the order requested
	err  error
}

func dialLoad(tb testing.TB, th *testHub, name string) *loadClient {
	tb.Helper()
	d := websocket.Dialer{ReadBufferSize: 64 << 10}
	ws, _, err := d.Dial(th.wsURL(), map[string][]string{"X-Test-Approver": {name}})
	if err != nil {
		tb.Fatal(err)
	}
	c := &loadClient{ws: ws, n: map[string]int{}}
	c.cond = sync.NewCond(&c.mu)
	go c.read()
	return c
}

func (c *loadClient) read() {
	for {
		_, data, err := c.ws.ReadMessage()
		at := time.Now()
		var h head
		if err == nil {
			h, err = decodeHead(data)
		}
		c.mu.Lock()
		if err != nil {
			c.err = err
			c.cond.Broadcast()
			c.mu.Unlock()
			return
		}
		c.n[h.typ]++
		if h.typ == EventRequested || h.typ == EventResolved {
			c.lat = append(c.lat, at.Sub(h.serverTime))
		}
		if h.typ == EventRequested {
			c.ids = append(c.ids, h.id)
		}
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// head is what a load client needs of an event.
type head struct {
	typ        string
	serverTime time.Time
	id         string
}

// decodeHead reads an event's type, server_time and approval id without
// decoding the rest (the code): events put these first, so the client's
// cost does not grow with the code's size and the measured latency is the
// hub's, not the test client's JSON decoding.
func decodeHead(data []byte) (head, error) {
	var h head
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return h, err
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return h, err
		}
		switch k {
		case "type":
			err = dec.Decode(&h.typ)
		case "server_time":
			err = dec.Decode(&h.serverTime)
		case "approval":
			if _, err = dec.Token(); err != nil { // {
				return h, err
			}
			if k, err = dec.Token(); err == nil && k == "id" {
				err = dec.Decode(&h.id)
			}
			return h, err
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return h, err
		}
	}
	return h, nil
}

func (c *loadClient) reset() {
	c.mu.Lock()
	c.lat, c.ids = c.lat[:0], c.ids[:0]
	clear(c.n)
	c.mu.Unlock()
}

// waitFor blocks until the client counted n events of typ.
func (c *loadClient) waitFor(typ string, n int, timeout time.Duration) error {
	timer := time.AfterFunc(timeout, func() { c.mu.Lock(); c.cond.Broadcast(); c.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n[typ] < n && c.err == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d %s events", c.n[typ], n, typ)
		}
		c.cond.Wait()
	}
	if c.err != nil {
		return fmt.Errorf("connection ended after %d %s events: %w", c.n[typ], typ, c.err)
	}
	return nil
}

// loadRound asks for loadPending approvals at once, has the approvers
// decide them over their sockets (each a share), and returns every
// delivery latency. It fails unless every approver saw every event.
func loadRound(tb testing.TB, th *testHub, clients []*loadClient, round int) []time.Duration {
	tb.Helper()
	for _, c := range clients {
		c.reset()
	}
	code := strings.Repeat("import subprocess\nsubprocess.run(['id'])\n", 20) // ~800 bytes, like real code
	outs := make(chan Outcome, loadPending)
	var wg sync.WaitGroup
	for i := range loadPending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := th.Confirm(context.Background(), request(fmt.Sprintf("r%d-s%d", round, i), code+fmt.Sprint(i)))
			if err != nil {
				tb.Error(err)
			}
			outs <- out
		}()
	}
	for _, c := range clients {
		if err := c.waitFor(EventRequested, loadPending, time.Minute); err != nil {
			tb.Fatal(err)
		}
	}
	clients[0].mu.Lock()
	ids := slices.Clone(clients[0].ids)
	clients[0].mu.Unlock()
	if len(ids) != loadPending {
		tb.Fatalf("%d ids", len(ids))
	}
	for i, c := range clients {
		for j := i; j < len(ids); j += len(clients) {
			d := "approve"
			if j%2 == 1 {
				d = "deny"
			}
			if err := c.ws.WriteJSON(map[string]string{"type": "decide", "ref": ids[j], "id": ids[j], "decision": d}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	for i, c := range clients {
		if err := c.waitFor(EventResolved, loadPending, time.Minute); err != nil {
			tb.Fatal(err)
		}
		// Each decider gets one decision.result per decision it sent (the
		// result follows the resolved event it caused).
		if err := c.waitFor(EventResult, (loadPending-i+len(clients)-1)/len(clients), time.Minute); err != nil {
			tb.Fatal(err)
		}
	}
	wg.Wait()
	close(outs)
	var approved, denied int
	for o := range outs {
		switch o.Status {
		case StatusApproved:
			approved++
		case StatusDenied:
			denied++
		}
	}
	if approved != loadPending/2 || denied != loadPending/2 {
		tb.Fatalf("%d approved, %d denied", approved, denied)
	}
	var lat []time.Duration
	for _, c := range clients {
		c.mu.Lock()
		lat = append(lat, c.lat...)
		c.mu.Unlock()
	}
	if want := 2 * loadPending * len(clients); len(lat) != want {
		tb.Fatalf("%d deliveries, want %d", len(lat), want)
	}
	return lat
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func setupLoad(tb testing.TB) (*testHub, []*loadClient) {
	th := newTestHub(tb, HubOptions{})
	clients := make([]*loadClient, loadApprovers)
	for i := range clients {
		clients[i] = dialLoad(tb, th, fmt.Sprintf("approver-%02d", i))
		if err := clients[i].waitFor(EventSnapshot, 1, 10*time.Second); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		for _, c := range clients {
			c.ws.Close()
		}
	})
	return th, clients
}

// TestLoad200Pending20Approvers runs two rounds of the load and checks
// that what the hub holds afterwards is bounded: no pending approval, a
// capped history, no connection dropped, and a heap that did not grow with
// the rounds.
func TestLoad200Pending20Approvers(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	th, clients := setupLoad(t)
	loadRound(t, th, clients, 0)
	base := heapInuse()
	goroutines := runtime.NumGoroutine()
	lat := loadRound(t, th, clients, 1)
	slices.Sort(lat)
	t.Logf("deliveries %d, p50 %v, p99 %v, max %v", len(lat), percentile(lat, .5), percentile(lat, .99), lat[len(lat)-1])
	th.mu.Lock()
	pending, hist, subs := len(th.pending), len(th.history), len(th.subs)
	th.mu.Unlock()
	if pending != 0 || hist > DefaultHistorySize || subs != loadApprovers {
		t.Fatalf("after the round: %d pending, %d in history, %d subscribers", pending, hist, subs)
	}
	lat = nil
	// The second round must not leave more behind than the first did; a
	// leak of one approval's state per round (code, JSON, timers) would be
	// ~200 KB here.
	if after := heapInuse(); after > base+1<<20 {
		t.Fatalf("heap grew from %d to %d KiB across a round", base>>10, after>>10)
	}
	if n := runtime.NumGoroutine(); n > goroutines+5 {
		t.Fatalf("goroutines grew from %d to %d across a round", goroutines, n)
	}
}

// BenchmarkHubDelivery is one op per round of 200 approvals requested and
// resolved with 20 approvers connected (8,000 deliveries). It reports the
// delivery latency percentiles over all rounds and the heap in use after
// the last round, once everything is resolved.
//
//	go test -run '^$' -bench HubDelivery -benchtime 5x ./confirm/
func BenchmarkHubDelivery(b *testing.B) {
	th, clients := setupLoad(b)
	base := heapInuse()
	var all []time.Duration
	b.ResetTimer()
	for i := range b.N {
		all = append(all, loadRound(b, th, clients, i)...)
	}
	b.StopTimer()
	slices.Sort(all)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(len(all))/float64(b.N), "deliveries/op")
	b.ReportMetric(ms(percentile(all, .50)), "p50-ms")
	b.ReportMetric(ms(percentile(all, .99)), "p99-ms")
	b.ReportMetric(ms(all[len(all)-1]), "max-ms")
	all = nil
	b.ReportMetric(float64(int64(heapInuse())-int64(base))/(1<<10), "heap-growth-KiB")
}
