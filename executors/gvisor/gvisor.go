package gvisor

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/docker"
)

// DefaultRuntime is the name runsc is registered under in the engine
// (daemon.json "runtimes", as scripts/dockerd.sh writes it).
const DefaultRuntime = "runsc"

// Config is the docker executor's configuration: the same images, limits,
// warm containers and reaping. Runtime defaults to DefaultRuntime (set it
// when the engine registered runsc under another name); Kind is always
// executors.KindGVisor.
type Config = docker.Config

// Executor is the docker executor with every container under runsc. All of
// its behaviour is the docker executor's; only the kind (what the policy
// names, what labels the containers and scopes the reaper) and the runtime
// differ.
type Executor struct {
	*docker.Executor
}

// Interface guards.
var (
	_ executors.Executor        = (*Executor)(nil)
	_ executors.Closer          = (*Executor)(nil)
	_ executors.SessionReleaser = (*Executor)(nil)
)

// New builds the executor. Like docker.New it fails only on a bad config:
// an engine that is down or does not know the runtime makes Available
// fail with the reason, and every run is refused until it does, never run
// under another runtime.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	if cfg.Kind != "" && cfg.Kind != executors.KindGVisor {
		return nil, fmt.Errorf("gvisor: config: kind %q: the gvisor executor is always %q", cfg.Kind, executors.KindGVisor)
	}
	cfg.Kind = executors.KindGVisor
	cfg.OwnKernel = true
	if cfg.Runtime == "" {
		cfg.Runtime = DefaultRuntime
	}
	e, err := docker.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	return &Executor{Executor: e}, nil
}
