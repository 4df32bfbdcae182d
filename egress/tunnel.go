package egress

import (
	"bufio"
	"context"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/policy"
)

// tunnel is one open connection through the proxy, registered so that
// caps can count it and a policy reload can re-decide it.
type tunnel struct {
	session string
	rec     *connRecord
	cancel  context.CancelFunc
	// Set by decided, under Service.mu: a tunnel not yet decided is not
	// re-decided by a reload (its own decision is still to come).
	ok    bool
	in    policy.EgressInput
	human bool
	// inspected: its requests are decided one by one.
	inspected bool
}

// decided records what allowed tun, for reloads to re-decide.
func (s *Service) decided(tun *tunnel, v verdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tun.ok, tun.in, tun.human, tun.inspected = true, v.in, v.human, v.inspect
}

// open registers a tunnel of session, or reports that the session is at
// its cap.
func (s *Service) open(tun *tunnel) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.tunnels[tun.session]
	if len(set) >= s.cfg.MaxTunnelsPerSession {
		return false
	}
	if set == nil {
		set = map[*tunnel]struct{}{}
		s.tunnels[tun.session] = set
	}
	set[tun] = struct{}{}
	s.deps.Metrics.tunnel(1)
	return true
}

func (s *Service) release(tun *tunnel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.tunnels[tun.session]
	if _, ok := set[tun]; !ok {
		return
	}
	delete(set, tun)
	if len(set) == 0 {
		delete(s.tunnels, tun.session)
	}
	s.deps.Metrics.tunnel(-1)
}

// OpenTunnels is how many connections session has open.
func (s *Service) OpenTunnels(sessionKey string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tunnels[sessionKey])
}

// Reloaded re-decides every open tunnel under the policy now in force and
// closes those it denies. A tunnel a person approved stays open while the
// policy still only requires approval for it; one it now allows stays open
// too, unless the policy now inspects its host and it is not inspected
// (its requests were never decided; the client's next connection is).
// Register it with policy.Engine.OnReload.
func (s *Service) Reloaded(ctx context.Context) {
	s.mu.Lock()
	var all []tunnel
	for _, set := range s.tunnels {
		for t := range set {
			if t.ok {
				all = append(all, *t)
			}
		}
	}
	s.mu.Unlock()
	for _, t := range all {
		d := s.deps.Policy.DecideEgress(ctx, t.in)
		keep := d.Action == policy.ActionAllow || (d.Action == policy.ActionRequireApproval && t.human)
		if keep && (!d.Inspect || t.inspected) {
			continue
		}
		reason := d.Rule
		if keep {
			reason = "inspected now"
		}
		s.log.InfoContext(ctx, "egress tunnel closed by a policy reload", "session_id", t.in.SessionID,
			"host", t.in.Host, "port", t.in.Port, "rule", d.Rule, "reason", reason)
		t.rec.closed(ruleReload + ": " + reason)
		t.cancel()
	}
}

// countingConn counts the bytes read from and written to a connection.
type countingConn struct {
	net.Conn
	read, written *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// pipe moves bytes both ways until the server is done (or one copy
// fails): then the whole tunnel ends. A client that half-closes passes
// its end of stream on to the server and keeps reading the answer. The
// client's connection is left open (its reads stopped by a deadline) so
// the caller writes the audit record before the client sees the end.
//
// The copies are between the bare connections, so that the kernel moves
// the bytes (splice(2) between TCP and Unix sockets) and the proxy costs
// little more than a second hop; what the client sent ahead is flushed
// from its buffer first. io.Copy's counts, partial ones included, go to
// the record.
func pipe(client net.Conn, clientR *bufio.Reader, up net.Conn, rec *connRecord) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n := clientR.Buffered(); n > 0 {
			ahead, _ := clientR.Peek(n)
			w, err := up.Write(ahead)
			rec.up.Add(int64(w))
			if err != nil {
				return
			}
			_, _ = clientR.Discard(n)
		}
		n, _ := io.Copy(up, client)
		rec.up.Add(n)
		closeWrite(up)
	}()
	n, _ := io.Copy(client, up)
	rec.down.Add(n)
	_ = up.Close()
	_ = client.SetReadDeadline(aLongTimeAgo)
	<-done
}

// aLongTimeAgo is a deadline that has passed: it wakes a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

func closeWrite(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := c.(closeWriter); ok {
		_ = cw.CloseWrite()
		return
	}
	if cc, ok := c.(countingConn); ok {
		closeWrite(cc.Conn)
		return
	}
	_ = c.Close()
}
