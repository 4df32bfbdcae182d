package docker

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// engineProxy stands between the executor and the real engine on a Unix
// socket of its own, so a test can make "the engine" vanish and come back
// without touching the engine other tests use.
type engineProxy struct {
	t      *testing.T
	path   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func newEngineProxy(t *testing.T) *engineProxy {
	target := executortest.EngineSocket(t)
	p := &engineProxy{t: t, path: filepath.Join(t.TempDir(), "engine.sock"), target: target, conns: map[net.Conn]bool{}}
	p.up()
	t.Cleanup(p.down)
	return p
}

func (p *engineProxy) host() string { return "unix://" + p.path }

func (p *engineProxy) up() {
	_ = os.Remove(p.path)
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
}

func (p *engineProxy) serve(c net.Conn) {
	u, err := net.Dial("unix", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); halfClose(u) }()
	_, _ = io.Copy(c, u)
	halfClose(c)
}

func halfClose(c net.Conn) {
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
}

// down drops the listener and every connection through it.
func (p *engineProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func TestEngineLossMidRunAndRecovery(t *testing.T) {
	needEngine(t)
	proxy := newEngineProxy(t)
	e := newTestExecutor(t, func(c *Config) { c.Host = proxy.host() })
	if err := e.Available(t.Context()); err != nil {
		t.Fatalf("Available through the proxy: %v", err)
	}
	s := spec(t, executors.LangBash, "echo started > started.txt; sleep 60")
	type outcome struct {
		res executors.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.Execute(t.Context(), s)
		done <- outcome{res, err}
	}()
	waitFile(t, filepath.Join(s.WorkspaceDir, "started.txt"))
	began := time.Now()
	proxy.down()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Execute did not return after the engine went away")
	}
	if !errors.Is(o.err, executors.ErrUnavailable) {
		t.Fatalf("Execute after engine loss: %+v, %v; want an error wrapping ErrUnavailable", o.res, o.err)
	}
	t.Logf("engine loss reported after %v: %v", time.Since(began), o.err)
	if err := e.Available(t.Context()); !errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("Available with the engine gone: %v", err)
	}
	if _, err := e.Execute(t.Context(), spec(t, executors.LangBash, "true")); !errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("Execute with the engine gone: %v", err)
	}

	// The engine comes back: the executor recovers without being rebuilt,
	// and removes the container it could not remove while it was gone.
	proxy.up()
	if err := e.Available(t.Context()); err != nil {
		t.Fatalf("Available after recovery: %v", err)
	}
	res := execute(t, e, spec(t, executors.LangPython, "print('back')"))
	if res.Stdout != "back\n" {
		t.Fatalf("run after recovery: %+v", res)
	}
	settle(t, e, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.leftover) == 0
	})
}

func TestEngineAbsentAtStart(t *testing.T) {
	e, err := New(t.Context(), Config{Pool: noPool, Host: "unix://" + filepath.Join(t.TempDir(), "none.sock"), Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("New must not fail for an absent engine: %v", err)
	}
	defer e.Close(context.Background())
	if err := e.Available(t.Context()); !errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("Available: %v", err)
	}
	_, err = e.Execute(t.Context(), spec(t, executors.LangPython, "print(1)"))
	if !errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("Execute: %v", err)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
