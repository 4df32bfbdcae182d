package k8s

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/executors"
)

// Labels every sandbox pod carries: found by them, reaped by them.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "sandgate"
	labelComponent = "app.kubernetes.io/component"
	componentSbx   = "sandbox"
	// labelSession is a hash of the session id: label values are short
	// and restricted, session ids are neither.
	labelSession  = "sandgate.dev/session"
	labelInstance = "sandgate.dev/instance"
	annSession    = "sandgate.dev/session-id"
	keyEnv        = "SANDBOXD_API_KEY"
	keyField      = "key"
	containerName = "sandbox"
	workspacePath = "/workspace"
)

// sessionHash is the session's label value and pod name suffix: any
// replica computes the same one, so any replica finds the session's pod.
func sessionHash(sessionID string) string {
	h := sha256.Sum256([]byte("sandgate/k8s\x00" + sessionID))
	return hex.EncodeToString(h[:])[:20]
}

// podName is the prefix of the session's pod names (a new pod after a
// loss gets a new suffix, so it never waits for the old one to go); a
// session has one pod at a time because its binding (binding.go) is
// created first.
func podName(sessionID string) string { return "sbx-" + sessionHash(sessionID) }

// podSpec is the locked-down pod of one session: non-root as the
// session's uid, read-only root, every capability dropped, seccomp
// RuntimeDefault, no privilege escalation, no service account token, no
// host namespaces or paths, Guaranteed resources, restartPolicy Never (a
// sandbox that died is lost, never silently restarted empty), and
// sandboxd listening on the pod's loopback only. The pause container is
// PID 1 of a shared PID namespace and reaps the orphans of runs.
func (e *Executor) podSpec(sessionID, secret string, uid, gid int, memMB int, layout executors.Layout) *corev1.Pod {
	// The session's path layout (executors.Layout): the workspace volume
	// at the framework's root too, and its workdir as sandboxd's HOME.
	args := append([]string{"/usr/local/bin/sandboxd"}, serveArgs(layout)...)
	spec := e.lockedSpec(uid, gid, memMB, layout.Root, args, []corev1.EnvVar{{Name: keyEnv, ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: keyField},
	}}})
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: podName(sessionID) + "-",
			Namespace:    e.cfg.Namespace,
			Labels:       e.labels(sessionID),
			Annotations:  map[string]string{annSession: sessionID},
		},
		Spec: spec,
	}
}

// serveArgs is sandboxd's command line in a pod (after the binary).
func serveArgs(layout executors.Layout) []string {
	args := []string{"serve", "--contained",
		"--listen", "127.0.0.1:" + strconv.Itoa(sandboxdPort), "--workspace", workspacePath}
	if d := layout.Dir(); d != workspacePath {
		args = append(args, "--home", d)
	}
	return args
}

// lockedSpec is what every sandbox pod shares, session pod or pooled
// (pool.go): the security context, resources, volumes and mounts.
// layoutRoot, when set, mounts the workspace there too.
func (e *Executor) lockedSpec(uid, gid, memMB int, layoutRoot string, command []string, env []corev1.EnvVar) corev1.PodSpec {
	t, f := true, false
	uid64, gid64 := int64(uid), int64(gid)
	grace := int64(1)
	mem := resource.MustParse(strconv.Itoa(memMB) + "Mi")
	cpu, cpuReq := resource.MustParse(e.cfg.PodCPU), resource.MustParse(e.cfg.PodCPURequest)
	ws := resource.MustParse(strconv.Itoa(e.cfg.WorkspaceMB) + "Mi")
	tmp := resource.MustParse("512Mi")
	code := resource.MustParse("16Mi")
	eph := resource.MustParse(strconv.Itoa(e.cfg.WorkspaceMB+1024) + "Mi")
	var rc *string
	if e.cfg.RuntimeClassName != "" {
		rc = &e.cfg.RuntimeClassName
	}
	mounts := []corev1.VolumeMount{{Name: "workspace", MountPath: workspacePath}}
	if layoutRoot != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: "workspace", MountPath: layoutRoot})
	}
	return corev1.PodSpec{
		AutomountServiceAccountToken:  &f,
		EnableServiceLinks:            &f,
		ShareProcessNamespace:         &t,
		Hostname:                      executors.Hostname,
		RuntimeClassName:              rc,
		TerminationGracePeriodSeconds: &grace,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   &t,
			RunAsUser:      &uid64,
			RunAsGroup:     &gid64,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:            containerName,
			Image:           e.cfg.Image,
			ImagePullPolicy: corev1.PullPolicy(e.cfg.ImagePullPolicy),
			Command:         command,
			WorkingDir:      workspacePath,
			Env:             env,
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: &f,
				ReadOnlyRootFilesystem:   &t,
				RunAsNonRoot:             &t,
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: mem, corev1.ResourceCPU: cpuReq, corev1.ResourceEphemeralStorage: eph},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: mem, corev1.ResourceCPU: cpu, corev1.ResourceEphemeralStorage: eph},
			},
			VolumeMounts: append(mounts, []corev1.VolumeMount{
				{Name: "tmp", MountPath: "/tmp"},
				{Name: "code", MountPath: executors.CodeDir},
				// The sandbox's /etc/hosts (localhost only) and empty
				// resolv.conf, as on every tier: a mount at these paths
				// replaces the ones the runtime would write, which name
				// the pod's address and the node's resolver.
				{Name: "etc", MountPath: "/etc/hosts", SubPath: "hosts", ReadOnly: true},
				{Name: "etc", MountPath: "/etc/resolv.conf", SubPath: "resolv.conf", ReadOnly: true},
			}...),
		}},
		Volumes: []corev1.Volume{
			{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &ws}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &tmp}}},
			{Name: "code", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &code}}},
			{Name: "etc", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: etcConfigMap}}}},
		},
	}
}

func (e *Executor) labels(sessionID string) map[string]string {
	return map[string]string{
		labelManagedBy: managedBy,
		labelComponent: componentSbx,
		labelSession:   sessionHash(sessionID),
		labelInstance:  e.cfg.Instance,
	}
}

// keySecret is the session's binding (binding.go): it holds the
// sandbox's per-sandbox credential (sandboxd's API key), minted with the
// binding, so a pod placed later for the session (after a loss, under a
// new binding) never meets the old key. A pod created for the session
// reads it into sandboxd's environment, which sandboxd drops at start; a
// pooled pod gets it through its FIFO; another replica reads it from the
// binding to reach the same sandbox.
func (e *Executor) keySecret(sessionID, name, key string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.cfg.Namespace, Labels: e.labels(sessionID)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{keyField: []byte(key)},
	}
}

// denyAllPolicy ships for clusters whose network plugin enforces
// NetworkPolicy: a sandbox pod accepts nothing and sends nothing. The
// gateway needs no network path to it (it reaches sandboxd through the
// apiserver and the kubelet, inside the pod's network namespace), and
// egress granted by policy goes through the gateway too. On a cluster
// that enforces none, the pod network itself must isolate (the test
// cluster's bridge isolates every port: scripts/k8s-cni-isolate).
func (e *Executor) denyAllPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "sandgate-sandbox-isolation", Namespace: e.cfg.Namespace,
			Labels: map[string]string{labelManagedBy: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelManagedBy: managedBy, labelComponent: componentSbx}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// etcConfigMap holds executors.NetworkFiles for every sandbox pod.
const etcConfigMap = "sandgate-sandbox-etc"

func (e *Executor) etcFiles() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: etcConfigMap, Namespace: e.cfg.Namespace,
			Labels: map[string]string{labelManagedBy: managedBy}},
		Data: executors.NetworkFiles,
	}
}

// namespace enforces Pod Security "restricted": the apiserver itself
// refuses a weaker pod, whoever creates it.
func (e *Executor) namespace() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Namespace, Labels: map[string]string{
		labelManagedBy:                               managedBy,
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}
}
