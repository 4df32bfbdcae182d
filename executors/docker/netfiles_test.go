package docker

import "testing"

func TestRuntimeDisablesNetwork(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--host-uds=open"}, false},
		{[]string{"--host-uds=open", "--network=none"}, true},
		{[]string{"--network", "none"}, true},
		{[]string{"-network=none"}, true},
		{[]string{"--network=sandbox"}, false},
		{[]string{"--network=host"}, false},
		{[]string{"--network"}, false},
	} {
		if got := runtimeDisablesNetwork(tc.args); got != tc.want {
			t.Errorf("runtimeDisablesNetwork(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
