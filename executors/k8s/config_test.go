package k8s

import (
	"strings"
	"testing"
)

// TestConfigValidate: a config no default can fix is refused before any
// pod is made, with the setting named.
func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		wantErr string // "" = valid
	}{
		{"defaults", Config{}, ""},
		{"cpu request below the limit", Config{PodCPU: "1", PodCPURequest: "100m"}, ""},
		{"cpu request below the default limit", Config{PodCPURequest: "250m"}, ""},
		{"cpu request above the limit", Config{PodCPU: "500m", PodCPURequest: "1"}, "pod_cpu_request 1 is above pod_cpu 500m"},
		{"cpu request above the default limit", Config{PodCPURequest: "2"}, "pod_cpu_request 2 is above pod_cpu 1"},
		{"cpu limit not a quantity", Config{PodCPU: "fast"}, `pod_cpu "fast"`},
		{"cpu request not a quantity", Config{PodCPURequest: "lots"}, `pod_cpu_request "lots"`},
		{"pull policy", Config{ImagePullPolicy: "Sometimes"}, "image_pull_policy"},
		{"pool size", Config{Pool: PoolConfig{Size: -1}}, "pool.size"},
		{"negative uid", Config{SandboxUID: -1}, "uid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("error %v, want one naming %q", err, c.wantErr)
			}
		})
	}
}

// TestCPURequestOnPods: the pods ask the scheduler for pod_cpu_request
// and are limited to pod_cpu; memory's request stays its limit.
func TestCPURequestOnPods(t *testing.T) {
	e := &Executor{cfg: Config{PodCPU: "1", PodCPURequest: "100m"}.withDefaults()}
	for name, spec := range map[string]func() []string{
		"session pod": func() []string {
			r := e.lockedSpec(1000, 1000, 512, "", []string{"sandboxd"}, nil).Containers[0].Resources
			return []string{r.Requests.Cpu().String(), r.Limits.Cpu().String(), r.Requests.Memory().String(), r.Limits.Memory().String()}
		},
		"pool pod": func() []string {
			r := e.poolTemplate(0, poolUIDBase).Spec.Containers[0].Resources
			return []string{r.Requests.Cpu().String(), r.Limits.Cpu().String(), r.Requests.Memory().String(), r.Limits.Memory().String()}
		},
	} {
		got := spec()
		if got[0] != "100m" || got[1] != "1" || got[2] != got[3] {
			t.Errorf("%s: cpu request %s limit %s, memory request %s limit %s; want 100m, 1 and equal memory", name, got[0], got[1], got[2], got[3])
		}
	}
}
