package docker

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestPoolBootPython runs a pooled container's claim step (the Python
// one) on the host as a child process, with no binds to make: a claim
// line that is not two decimals other than 0 exits 125 before anything
// else, and a good one execs the script with the claimed uid and gid, the
// gid as its only supplementary group (as the engine gives a container's
// user), no capability in any set and no signal ignored or blocked
// (Python ignores SIGPIPE and SIGXFSZ, and the step is started here with
// SIGHUP and SIGUSR1 ignored too, as nohup would: an exec keeps them), the
// boot script's arguments in place, and what follows the line on stdin
// left for it.
// The good cases need root (they change identity).
func TestPoolBootPython(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this host")
	}
	const script = `read -r rest; echo "$0 $1 $2 $(id -u) $(id -g) [$(id -G)] $rest"; sed -n 's/^Groups:\t//p' /proc/self/status; ` +
		`grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status | tr -d '\t' | sort | paste -sd ' ' -; sed -n 's/^Sig\(Ign\|Blk\):\t//p' /proc/self/status | paste -sd ' ' -`
	const noCaps = "CapAmb:0000000000000000 CapBnd:0000000000000000 CapEff:0000000000000000 CapInh:0000000000000000 CapPrm:0000000000000000"
	tests := []struct {
		name, stdin string
		root        bool
		want        string
		code        int
	}{
		{name: "uid 0", stdin: "0 5\n", code: 125},
		{name: "gid 0", stdin: "5 0\n", code: 125},
		{name: "not decimal", stdin: "5 x\n", code: 125},
		{name: "signed", stdin: "+5 5\n", code: 125},
		{name: "three fields", stdin: "5 5 5\n", code: 125},
		{name: "no line", stdin: "5 5", code: 125},
		{name: "too long", stdin: strings.Repeat("1", 60) + " 5\n", code: 125},
		{name: "claimed", stdin: "61003 61004\nnext line\n", root: true,
			want: bootArg0 + " 512 - 61003 61004 [61004] next line\n61004 \n" + noCaps + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Geteuid() != 0 {
				t.Skip("changing identity needs root")
			}
			cmd := exec.Command("/bin/sh", "-c", `trap '' HUP USR1; exec "$@"`, "sh",
				"python3", "-I", "-S", "-c", poolBootPython, bootArg0, poolBootPrefix, "512", "-", script)
			cmd.Stdin = strings.NewReader(tt.stdin)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			got := out.String()
			if tt.code == 0 {
				got = checkSigIgn(t, got)
			}
			if code != tt.code || got != tt.want {
				t.Fatalf("exit %d stdout %q stderr %q, want exit %d stdout %q", code, out.String(), errb.String(), tt.code, tt.want)
			}
		})
	}
}

// checkSigIgn takes the script's last line, its SigIgn and SigBlk
// masks, off out and fails unless both are empty.
func checkSigIgn(t *testing.T, out string) string {
	t.Helper()
	i := strings.LastIndex(strings.TrimSuffix(out, "\n"), "\n")
	masks := strings.Fields(out[i+1:])
	if len(masks) != 2 {
		t.Fatalf("no SigIgn and SigBlk line in %q", out)
	}
	for j, name := range []string{"SigBlk", "SigIgn"} { // /proc/self/status's order
		if m, err := strconv.ParseUint(masks[j], 16, 64); err != nil || m != 0 {
			t.Errorf("the run starts with %s %s, want none", name, masks[j])
		}
	}
	return out[:i+1]
}
