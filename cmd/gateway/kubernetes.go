package main

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/k8s"
)

// KubernetesConfig is the Kubernetes executor tier (executors/k8s): a pod
// per session in a namespace that enforces Pod Security "restricted".
// Disabled by default: it needs a cluster (kubeconfig, or in-cluster
// when empty). The policy routes to it by the executor name "kubernetes".
type KubernetesConfig struct {
	Enabled    bool `yaml:"enabled"`
	k8s.Config `yaml:",inline"`
}

// kubernetesExecutor builds the tier. A cluster that does not answer at
// start is an error: the operator enabled it.
func (gw *gateway) kubernetesExecutor(ctx context.Context, c KubernetesConfig) (executors.Executor, error) {
	cfg := c.Config
	cfg.Logger = gw.log
	if cfg.Instance == "" {
		cfg.Instance = replicaName(gw.cfg.Storage)
	}
	e, err := k8s.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: %w", err)
	}
	return e, nil
}
