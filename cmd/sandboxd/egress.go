package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/executors"
)

// The egress relay (DESIGN.md §9): an aio container has no interface but
// lo, and a run the gateway grants network finds the gateway's egress
// proxy at 127.0.0.1:EgressPort. sandboxd listens there and relays each
// connection, bytes only, to the proxy's Unix socket that the gateway
// listens on in the instance's egress directory (bind-mounted read-only
// at executors.EgressDir). Which run a connection belongs to, and
// whether it may be served at all, the gateway decides: sandboxd neither
// reads nor decides anything.

// relayEgress serves the relay until ctx ends. A listener that cannot be
// made is logged and left: runs granted network then find nothing on the
// port, which fails closed.
func relayEgress(ctx context.Context, socket string, log *slog.Logger) {
	ln, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(executors.EgressPort))
	if err != nil {
		log.Error("egress relay: listen", "err", err.Error())
		return
	}
	context.AfterFunc(ctx, func() { ln.Close() })
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go relayOne(c, socket)
	}
}

// relayOne copies c to a new connection to socket and back, half-closing
// each direction as it ends.
func relayOne(c net.Conn, socket string) {
	defer c.Close()
	up, err := net.Dial("unix", socket)
	if err != nil {
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(up, c)
		_ = up.(*net.UnixConn).CloseWrite()
	})
	_, _ = io.Copy(c, up)
	_ = c.(*net.TCPConn).CloseWrite()
	wg.Wait()
}

// egressEnv adds a granted run's proxy (and CA) variables to env, the
// same ones every executor gives (executors.EgressEnv).
func egressEnv(env map[string]string, ca bool) map[string]string {
	if env == nil {
		env = map[string]string{}
	}
	for _, kv := range executors.EgressEnv(ca) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}
