package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

func bashSpec(t *testing.T, session, code string) executors.Spec {
	return executors.Spec{SessionID: session, Language: executors.LangBash, Code: code,
		Timeout: 30 * time.Second, WorkspaceDir: executortest.NewWorkspace(t)}
}

// TestSessionStateInPod: a session's runs share its pod (a file written
// by one run is read by the next, and the host workspace mirrors it), and
// the pod is labelled with the session and locked down as the tier says.
func TestSessionStateInPod(t *testing.T) {
	e := newTestExecutor(t)
	session := "sess-" + executortest.Nonce()
	spec := bashSpec(t, session, "echo hello > note.txt; id -u")
	res, err := e.Execute(t.Context(), spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("first run: %v %+v", err, res)
	}
	spec.Code = "cat note.txt; hostname"
	res, err = e.Execute(t.Context(), spec)
	if err != nil || res.Stdout != "hello\nsandbox\n" {
		t.Fatalf("second run: %v stdout %q stderr %q", err, res.Stdout, res.Stderr)
	}
	pods, err := e.cs.CoreV1().Pods(e.cfg.Namespace).List(t.Context(),
		metav1.ListOptions{LabelSelector: labelSession + "=" + sessionHash(session)})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the session: %v %v, want exactly one", names(pods.Items), err)
	}
	p := pods.Items[0]
	sc, cs := p.Spec.SecurityContext, p.Spec.Containers[0].SecurityContext
	switch {
	case p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken:
		t.Error("service account token mounted")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0:
		t.Errorf("pod security context %+v: want non-root", sc)
	case cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem:
		t.Error("root filesystem writable")
	case len(cs.Capabilities.Drop) != 1 || cs.Capabilities.Drop[0] != "ALL":
		t.Errorf("capabilities %+v: want all dropped", cs.Capabilities)
	case p.Spec.Containers[0].Resources.Limits.Memory().IsZero():
		t.Error("no memory limit")
	}
	if err := e.ReleaseSession(t.Context(), session); err != nil {
		t.Fatal(err)
	}
	waitNoPods(t, e, labelSession+"="+sessionHash(session))
}

// TestLostPodIsReported: a pod deleted behind the gateway's back is
// noticed; the next request says the sandbox was lost (it is not
// silently replaced with an empty one), and the one after that gets a
// new pod.
func TestLostPodIsReported(t *testing.T) {
	e := newTestExecutor(t)
	session := "sess-" + executortest.Nonce()
	spec := bashSpec(t, session, "echo kept > state.txt")
	if _, err := e.Execute(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	grace := int64(0)
	if err := e.cs.CoreV1().Pods(e.cfg.Namespace).Delete(t.Context(), mustSessionPod(t, e, session).Name,
		metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	spec.Code = "cat state.txt"
	_, err := e.Execute(t.Context(), spec)
	if !errors.Is(err, ErrSandboxLost) || !errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("run after the pod was deleted: %v, want the sandbox lost (unavailable)", err)
	}
	// The next run starts afresh: the workspace the client sees is what
	// the last completed run left, copied into the new pod.
	spec.Code = "cat state.txt; echo new"
	res, err := e.Execute(t.Context(), spec)
	if err != nil || res.Stdout != "kept\nnew\n" {
		t.Fatalf("run on a new pod: %v stdout %q stderr %q", err, res.Stdout, res.Stderr)
	}
}

// TestRestrictedAdmission: the sandbox namespace enforces Pod Security
// "restricted", so the apiserver itself refuses a privileged pod, a
// host path and a root pod there, whoever asks.
func TestRestrictedAdmission(t *testing.T) {
	e := newTestExecutor(t)
	t2, f := true, false
	root := int64(0)
	cases := map[string]func(p *corev1.Pod){
		"privileged": func(p *corev1.Pod) {
			sc := p.Spec.Containers[0].SecurityContext
			sc.Privileged, sc.AllowPrivilegeEscalation = &t2, &t2
		},
		"host path": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}})
		},
		"root": func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsUser, p.Spec.SecurityContext.RunAsNonRoot = &root, &f
			p.Spec.Containers[0].SecurityContext.RunAsNonRoot = &f
		},
	}
	for name, weaken := range cases {
		t.Run(name, func(t *testing.T) {
			p := e.podSpec("admission-"+executortest.Nonce(), "no-such-secret", 4000, 4000, 256, executors.Layout{})
			weaken(p)
			_, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
				t.Fatalf("create a %s pod: %v, want forbidden by PodSecurity restricted", name, err)
			}
		})
	}
	// The unweakened pod is admitted (so the refusals above are about
	// what each case changed).
	p := e.podSpec("admission-"+executortest.Nonce(), "no-such-secret", 4000, 4000, 256, executors.Layout{})
	if _, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Create(t.Context(), p, metav1.CreateOptions{DryRun: []string{"All"}}); err != nil {
		t.Fatalf("the tier's own pod refused: %v", err)
	}
}

// TestCloseReapsPods: Close deletes every pod of the gateway instance.
func TestCloseReapsPods(t *testing.T) {
	e := newTestExecutor(t)
	for range 2 {
		if _, err := e.Execute(t.Context(), bashSpec(t, "sess-"+executortest.Nonce(), "true")); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitNoPods(t, e, labelInstance+"="+e.cfg.Instance)
}
