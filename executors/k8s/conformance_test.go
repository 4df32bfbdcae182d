package k8s

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestConformance runs the executor conformance suite on the Kubernetes
// tier: each sub-test is a new session, so each run gets a pod of its
// own, created for it, reached through the apiserver, and deleted at the
// end.
// It includes the no-network case (a listener on the host's 127.0.0.1
// is unreachable from the pod), the memory and process limits, and the
// environment.
func TestConformance(t *testing.T) {
	conformance(t, newTestExecutor(t))
}

// TestConformancePooled runs the suite on pods claimed from the warm
// pool (a sub-test's session claims one when one is idle), whose sandboxd
// started before any session existed and took its key at the claim, and
// which run as uids of their own: a client must not be able to tell them
// from pods made for it (the process-limit case fails when pool pods
// share a uid).
func TestConformancePooled(t *testing.T) {
	e := newTestExecutor(t, func(c *Config) { c.Pool.Size = 2; c.PodCPURequest = "100m" })
	waitIdle(t, e, 2, nil)
	conformance(t, e)
}

func conformance(t *testing.T, e *Executor) {
	executortest.Run(t, executortest.Harness{
		New:              func(*testing.T) executors.Executor { return releasing{e} },
		ProcessesVisible: true, // the test cluster's runc pods run on this host
		DataStack:        true, // the sandbox image is the runtime image plus sandboxd
		CopiedWorkspace:  "the pod's workspace is an emptyDir, copied from and to the host around each run",
		FingerprintExceptions: map[string]string{
			"env SANDBOXD_RUN": "sandboxd's per-run marker variable (proctree.go)",
		},
	})
}

// releasing ends each run's session after the run, as the manager does
// when a session is deleted: every sub-test's session is new, and the
// node's pod budget is not the suite's to spend.
type releasing struct{ *Executor }

func (r releasing) Execute(ctx context.Context, spec executors.Spec) (executors.Result, error) {
	res, err := r.Executor.Execute(ctx, spec)
	if rerr := r.ReleaseSession(context.WithoutCancel(ctx), spec.SessionID); rerr != nil && err == nil {
		err = rerr
	}
	return res, err
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+"("+string(p.Status.Phase)+")")
	}
	return out
}
