//go:build ignore

// Command precompile embeds gVisor's precompiled seccomp-bpf programs
// into a copy of gVisor's source before runsc is built from it.
//
// gVisor's Bazel build generates runsc/boot/filter/filter_precompiled.go
// and runsc/fsgofer/filter/filter_precompiled.go with a program for every
// supported configuration; the Go module ships both files empty
// ("PrecompilationDisabledAtBuildTime = true"). A runsc built with the go
// command then builds and optimises the sentry's filter at every sandbox
// start: about 36 ms of each boot and of each restore on this machine,
// on the path of a gVisor session's first output and of a resume. The
// programs come from gVisor's own config packages (PrecompiledPrograms),
// and gVisor checks each against the running configuration's key before
// using it, building the filter as before when none matches.
//
// Run from the root of the copied gVisor module: go run precompile.go.
// scripts/gvisor.sh does that; this file is not part of sandgate's module
// (the ignore constraint keeps it out of builds and of go.mod).
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	bootconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

const (
	disabled = "PrecompilationDisabledAtBuildTime = true"
	enabled  = "PrecompilationDisabledAtBuildTime = false"
	anchor   = "programs := make(map[string]precompiledseccomp.Program)\n"
)

func main() {
	targets := []struct {
		file     string
		programs func() ([]precompiledseccomp.Program, error)
	}{
		{"runsc/boot/filter/filter_precompiled.go", bootconfig.PrecompiledPrograms},
		{"runsc/fsgofer/filter/filter_precompiled.go", goferconfig.PrecompiledPrograms},
	}
	for _, t := range targets {
		n, err := embed(t.file, t.programs)
		if err != nil {
			fmt.Fprintln(os.Stderr, "precompile:", err)
			os.Exit(1)
		}
		fmt.Printf("precompile: %d programs in %s\n", n, t.file)
	}
}

// embed writes programs' registrations into file's registerPrograms and
// marks precompilation enabled. A file whose layout is not the one
// expected is an error: building without the programs would be silent.
func embed(file string, programs func() ([]precompiledseccomp.Program, error)) (int, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	text := string(src)
	if strings.Count(text, disabled) != 1 || strings.Count(text, anchor) != 1 {
		return 0, fmt.Errorf("%s: not the layout this generator knows", file)
	}
	progs, err := programs()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	sort.Slice(progs, func(i, j int) bool { return progs[i].Name < progs[j].Name })
	var reg strings.Builder
	for _, p := range progs {
		reg.WriteString(p.Registration("\t", "precompiledseccomp", "programs"))
	}
	text = strings.Replace(text, disabled, enabled, 1)
	text = strings.Replace(text, anchor, anchor+reg.String(), 1)
	return len(progs), os.WriteFile(file, []byte(text), 0o644)
}
