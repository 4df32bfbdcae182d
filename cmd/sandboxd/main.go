// Command sandboxd is the agent that runs inside a pooled AIO sandbox
// container. It serves the subset of the AIO sandbox HTTP API
// (agent-infra/sandbox, ../shared/research/aio-api.md §3) that the
// gateway's aio executor and browser use, with the same request and
// response shapes: the {success, message, data, hint} envelope with
// explicit nulls, FastAPI's 404 {"detail":"Not Found"} for unknown routes
// and 422 {"detail":[...]} for invalid bodies. That subset is GET
// /v1/sandbox, /v1/bash/{exec,kill,sessions,sessions/create,
// sessions/{id}/close}, /v1/code/execute, /v1/browser/info and /cdp/.
//
// The AIO calls of agent frameworks (DeerFlow's /v1/shell/exec and
// /v1/file/*) are not served here: the gateway serves them itself at a
// DeerFlow sandbox URL (package deerflow), where shell/exec is an
// execute through the policy pipeline and the file calls are the workspace
// API, so that no call reaches a sandbox around risk, policy, approval and
// audit.
//
// Usage:
//
//	sandboxd serve --listen unix:/run/sandboxd/sandboxd.sock
//	sandboxd serve --listen 127.0.0.1:8080
//	sandboxd standby
//
// serve reads the API key from the environment variable named by
// --api-key-env (default SANDBOXD_API_KEY), removes it from its own
// environment, and refuses to start without one: every request must carry
// it as X-AIO-API-Key or Authorization: Bearer. With --await-key it starts
// without one and refuses every request until POST /v1/claim sets it
// (claim.go). The key is compared in
// constant time and never logged.
//
// standby only waits for SIGTERM: it is the main process of a pool
// instance started ahead of its session. The pool starts `sandboxd serve`
// with docker exec as the session's own uid once it knows the session
// (executors/aio).
//
// Every command runs in its own process group with an environment built
// from scratch (PATH, HOME, LANG and what the request adds). When a command
// times out or is killed, its whole tree dies: the process group, every
// descendant, every process carrying the run's marker variable and, with
// --contained (the container's PID namespace is sandboxd's alone), every
// process that appeared during the run and belongs to no other run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// version is reported by GET /v1/sandbox.
const version = "sandboxd-1.0"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "standby":
		standby()
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandboxd:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: sandboxd serve [flags] | sandboxd standby")
	os.Exit(2)
}

// standby blocks until SIGTERM or SIGINT.
func standby() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg := defaultConfig()
	listen := fs.String("listen", "unix:/run/sandboxd/sandboxd.sock", "unix:PATH or HOST:PORT")
	keyEnv := fs.String("api-key-env", "SANDBOXD_API_KEY", "environment variable holding the API key")
	fs.StringVar(&cfg.Workspace, "workspace", cfg.Workspace, "the workspace directory: default cwd of commands")
	fs.StringVar(&cfg.Home, "home", "", "HOME of commands (default: the workspace)")
	fs.StringVar(&cfg.Chromium, "chromium", cfg.Chromium, "the Chromium binary started by /v1/browser/info")
	fs.StringVar(&cfg.CodeDir, "code-dir", cfg.CodeDir, "where the gateway's program files are written (every backend's path; change only outside a container)")
	fs.BoolVar(&cfg.Contained, "contained", false, "sandboxd owns its PID namespace: kill orphans of a killed run too")
	fs.BoolVar(&cfg.AwaitKey, "await-key", false, "serve without a key until POST /v1/claim sets one (a pool's idle sandbox)")
	awaitClaim := fs.Bool("await-claim", false, "run as root until POST /v1/claim names the key and the identity, then serve as that identity (claimas.go)")
	egress := fs.String("egress", "", "unix:PATH of the gateway's egress proxy socket: relay 127.0.0.1:3128 to it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := os.Getenv(*keyEnv)
	_ = os.Unsetenv(*keyEnv)
	if *awaitClaim {
		ln, err := listenOn(*listen)
		if err != nil {
			return err
		}
		return awaitIdentity(ln, args, *keyEnv, cfg.Workspace, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	}
	if key == "" && !cfg.AwaitKey {
		return fmt.Errorf("no API key in $%s: refusing to serve without one", *keyEnv)
	}
	cfg.APIKey = key
	if cfg.Home == "" {
		cfg.Home = cfg.Workspace
	}
	cfg.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))

	ln, err := listenOn(*listen)
	if err != nil {
		return err
	}
	srv := newServer(cfg)
	if !strings.HasPrefix(*listen, "fd:") {
		// Probe the interpreters before the first readiness check asks. A
		// sandboxd exec'd by its claim (claimas.go) does not: its first
		// request is the session's first run, which the probe's processes
		// would slow down; GET /v1/sandbox probes then.
		go srv.detail()
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if sock, ok := strings.CutPrefix(*egress, "unix:"); ok && sock != "" {
		go relayEgress(ctx, sock, cfg.Log)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	cfg.Log.Info("sandboxd serving", "listen", *listen, "workspace", cfg.Workspace, "version", version)
	select {
	case err := <-errc:
		srv.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = hs.Shutdown(sctx)
	srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// listenOn opens a Unix socket (mode 0600, a stale file replaced) or a TCP
// listener, or takes over an inherited one ("fd:N", from an identity
// claim: claimas.go).
func listenOn(addr string) (net.Listener, error) {
	if n, ok := strings.CutPrefix(addr, "fd:"); ok {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 3 {
			return nil, fmt.Errorf("listen %q: not an inherited descriptor", addr)
		}
		f := os.NewFile(uintptr(fd), "listener")
		defer f.Close()
		return net.FileListener(f)
	}
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	return ln, err
}
