package k8s

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// newBare is an executor that can only probe the cluster (Available):
// no namespace is made and nothing is watched.
func newBare(rc *rest.Config) (*Executor, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("k8s: client: %w", err)
	}
	return &Executor{cfg: Config{}.withDefaults(), rc: rc, cs: cs}, nil
}
