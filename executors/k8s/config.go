package k8s

import (
	"cmp"
	"errors"
	"fmt"
	"k8s.io/apimachinery/pkg/api/resource"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio"
)

// Kind names the tier in the policy's decision ("executor": "kubernetes")
// and in capabilities.
const Kind executors.Kind = "kubernetes"

// Defaults, in one place.
const (
	DefaultNamespace = "sandgate-sandboxes"
	DefaultImage     = "sandgate/k8s-sandbox:latest"
	// DefaultSandboxID is the uid/gid of a session that names none: the
	// aio executor's, which the runtime image names "sandbox"
	// (images/runtime/trim.sh), so whoami answers as on every tier.
	// sandboxd's process budget is relative to the uid's tasks at a run's
	// start, so pods sharing the uid on a node do not starve each other.
	DefaultSandboxID = 62000
	DefaultTimeout   = 30 * time.Second
	// DefaultReadyTimeout bounds pod creation to sandboxd answering: a
	// cold pod reaches Running in about a second on an idle node.
	DefaultReadyTimeout = 90 * time.Second
	DefaultPodMemoryMB  = 2048
	DefaultPodCPU       = "1"
	// DefaultWorkspaceMB caps the pod's workspace (an emptyDir) and what
	// a pull copies back to the host.
	DefaultWorkspaceMB = 1024
	// sandboxdPort is where sandboxd listens, on the pod's loopback only:
	// the gateway reaches it through the apiserver's port-forward.
	sandboxdPort = 8080
	// DefaultPoolName names the pool's ReplicaSet: one per namespace,
	// shared by every replica of the gateway (its pods belong to no
	// session and no replica until claimed).
	DefaultPoolName = "sandgate-pool"
	// MaxPoolSize bounds pool.size: idle pods hold their requests.
	MaxPoolSize = 200
)

// PoolConfig is the warm pool: a ReplicaSet keeps Size idle sandbox pods
// running; a session whose sandbox fits a pooled pod (the default uid,
// layout and pod resources) claims one instead of waiting for a new pod.
type PoolConfig struct {
	Size int    `yaml:"size"`
	Name string `yaml:"name"`
}

// Config configures the tier. Zero fields take the defaults above.
type Config struct {
	// Kubeconfig is the path of a kubeconfig; empty means in-cluster
	// (the gateway's ServiceAccount).
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace holds the sandbox pods. The executor creates it if
	// missing, labelled to enforce Pod Security "restricted".
	Namespace string `yaml:"namespace"`
	// Image is the sandbox image: the runtime root plus sandboxd
	// (scripts/k8s-images.sh builds sandgate/k8s-sandbox).
	Image string `yaml:"image"`
	// ImagePullPolicy: "Never" on a cluster whose images are imported
	// (the test cluster), "IfNotPresent" by default.
	ImagePullPolicy string `yaml:"image_pull_policy"`
	// RuntimeClassName is set on every pod when non-empty ("gvisor" in
	// production).
	RuntimeClassName string `yaml:"runtime_class_name"`
	// Instance labels the pods of this gateway (its replica name), so
	// Close reaps only its own; sessions are found by their own label.
	Instance string `yaml:"instance"`
	// SandboxUID and SandboxGID: see DefaultSandboxID.
	SandboxUID     int           `yaml:"sandbox_uid"`
	SandboxGID     int           `yaml:"sandbox_gid"`
	DefaultTimeout time.Duration `yaml:"default_timeout"`
	ReadyTimeout   time.Duration `yaml:"ready_timeout"`
	// PodMemoryMB and PodCPU are the pod's requests and limits (equal:
	// Guaranteed QoS); a run's memory obligation above PodMemoryMB raises
	// the pod's at its creation.
	PodMemoryMB int    `yaml:"pod_memory_mb"`
	PodCPU      string `yaml:"pod_cpu"`
	// PodCPURequest, when set below PodCPU, is what each pod asks the
	// scheduler for, while PodCPU stays its limit (Burstable QoS). Idle
	// pool pods use almost no CPU, so a platform that keeps a warm pool
	// overcommits CPU as it would for any idle workload; memory is never
	// overcommitted (its request stays equal to its limit). The price:
	// under node pressure the kubelet evicts Burstable pods before
	// Guaranteed ones, and a session whose pod is evicted is told its
	// sandbox was lost.
	PodCPURequest string `yaml:"pod_cpu_request"`
	WorkspaceMB   int    `yaml:"workspace_mb"`
	// Pool is the warm pool of idle sandbox pods (pool.go); off when its
	// size is 0.
	Pool PoolConfig `yaml:"pool"`
	// Limits are the per-run defaults (aio.DefaultLimits when zero).
	Limits executors.Limits `yaml:"-"`
	Logger *slog.Logger     `yaml:"-"`
}

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = "IfNotPresent"
	}
	if c.Instance == "" {
		c.Instance = "gateway"
	}
	if c.SandboxUID == 0 {
		c.SandboxUID = DefaultSandboxID
	}
	if c.SandboxGID == 0 {
		c.SandboxGID = c.SandboxUID
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.PodMemoryMB <= 0 {
		c.PodMemoryMB = DefaultPodMemoryMB
	}
	if c.PodCPU == "" {
		c.PodCPU = DefaultPodCPU
	}
	if c.PodCPURequest == "" {
		c.PodCPURequest = c.PodCPU
	}
	if c.WorkspaceMB <= 0 {
		c.WorkspaceMB = DefaultWorkspaceMB
	}
	if c.Pool.Name == "" {
		c.Pool.Name = DefaultPoolName
	}
	c.Limits = c.Limits.Or(aio.DefaultLimits)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate rejects a config no default can fix.
func (c Config) Validate() error {
	switch c.ImagePullPolicy {
	case "", "Never", "IfNotPresent", "Always":
	default:
		return fmt.Errorf("image_pull_policy %q: want Never, IfNotPresent or Always", c.ImagePullPolicy)
	}
	if c.Pool.Size < 0 || c.Pool.Size > MaxPoolSize {
		return fmt.Errorf("pool.size %d: want 0 (off) to %d", c.Pool.Size, MaxPoolSize)
	}
	if err := validCPU(cmp.Or(c.PodCPU, DefaultPodCPU), c.PodCPURequest); err != nil {
		return err
	}
	if c.SandboxUID < 0 || c.SandboxGID < 0 {
		return errors.New("sandbox uid and gid must not be negative")
	}
	return nil
}

// validCPU: both are quantities (the request when set), and the request is at most
// the limit, as the apiserver would otherwise refuse every pod.
func validCPU(limit, request string) error {
	var lq, rq resource.Quantity
	lq, err := resource.ParseQuantity(limit)
	if err != nil {
		return fmt.Errorf("pod_cpu %q: %w", limit, err)
	}
	if request != "" {
		if rq, err = resource.ParseQuantity(request); err != nil {
			return fmt.Errorf("pod_cpu_request %q: %w", request, err)
		}
	}
	if request != "" && rq.Cmp(lq) > 0 {
		return fmt.Errorf("pod_cpu_request %s is above pod_cpu %s", request, limit)
	}
	return nil
}
