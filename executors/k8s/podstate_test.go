package k8s

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestStateOfWaitingReasons: a sandbox container waiting for a reason
// that will not change (no image, a missing Secret) makes the pod gone,
// so the claim fails at once with the reason; kubelet's own cache not
// synced yet under load is retried by kubelet, so the pod stays pending
// (CI once failed a run on it).
func TestStateOfWaitingReasons(t *testing.T) {
	tests := []struct {
		reason, message string
		want            podState
	}{
		{"ErrImageNeverPull", "image not present", podGone},
		{"ImagePullBackOff", "back-off", podGone},
		{"InvalidImageName", "bad", podGone},
		{"CreateContainerConfigError", `secret "sg-key" not found`, podGone},
		{"CreateContainerConfigError", "failed to sync secret cache: timed out waiting for the condition", podPending},
		{"CreateContainerConfigError", "failed to sync configmap cache: timed out waiting for the condition", podPending},
		{"ContainerCreating", "", podPending},
	}
	for _, tt := range tests {
		t.Run(tt.reason+"/"+tt.message, func(t *testing.T) {
			p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
				Name: containerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: tt.reason, Message: tt.message}},
			}}}}
			if got, why := stateOf(p); got != tt.want {
				t.Errorf("stateOf = %v (%q), want %v", got, why, tt.want)
			}
		})
	}
}
