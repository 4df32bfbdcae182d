// Command gateway is sandgate's server. It reads the configuration, wires
// every component explicitly (no init() registration), serves the HTTP API
// and shuts down gracefully on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "sandgate:", err)
		}
		os.Exit(1)
	}
}

// run is main without the process globals, so tests can start a gateway.
// `gateway audit verify` checks the audit hash chains instead of serving;
// `gateway policy test|check|diff` are the policy administrators' tools.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) >= 2 && args[0] == "audit" && args[1] == "verify" {
		return runAuditVerify(ctx, args[2:], getenv, stdout, stderr)
	}
	if len(args) >= 1 && args[0] == "policy" {
		return runPolicy(ctx, args[1:], getenv, stdout, stderr)
	}
	cfg, err := loadConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	gw, err := build(ctx, cfg, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	return gw.serve(ctx)
}
