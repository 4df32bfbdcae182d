package docker

import "testing"

func TestRunscPlatform(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "systrap"},
		{[]string{"--host-uds=open", "--network=none"}, "systrap"},
		{[]string{"--platform=ptrace"}, "ptrace"},
		{[]string{"--platform", "kvm", "--network=none"}, "kvm"},
		{[]string{"--platform=ptrace", "-platform=systrap"}, "systrap"},
	} {
		if got := runscPlatform(tc.args); got != tc.want {
			t.Errorf("runscPlatform(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
