package docker

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupReading is one container's cgroup counters.
type cgroupReading struct {
	cpuNanos              uint64
	memUsed, cache, limit int64
}

// cgroupRoot is where the host's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// readCgroup reads the cgroup of the host process pid (a container's
// first process, from the engine's inspect): the engine's stats answer
// nothing for a container that joined another's network namespace, and
// the files are the readings themselves, under cgroup v1 or v2 and either
// cgroup driver. It needs the gateway on the engine's host, as the
// workspace bind mounts do.
func readCgroup(pid int) (cgroupReading, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return cgroupReading{}, err
	}
	paths := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	if p, ok := paths["memory"]; ok { // v1
		mem := filepath.Join(cgroupRoot, "memory", p)
		r := cgroupReading{}
		r.cpuNanos = uint64(readInt(filepath.Join(cgroupRoot, "cpuacct", paths["cpuacct"], "cpuacct.usage")))
		used := readInt(filepath.Join(mem, "memory.usage_in_bytes"))
		r.cache = statField(filepath.Join(mem, "memory.stat"), "total_inactive_file")
		r.memUsed = max(used-r.cache, 0)
		if l := readInt(filepath.Join(mem, "memory.limit_in_bytes")); l < 1<<60 {
			r.limit = l
		}
		return r, nil
	}
	p, ok := paths[""]
	if !ok {
		return cgroupReading{}, errors.New("docker: no cgroup for the container's process")
	}
	dir := filepath.Join(cgroupRoot, p) // v2
	r := cgroupReading{cpuNanos: uint64(statField(filepath.Join(dir, "cpu.stat"), "usage_usec")) * 1000}
	r.cache = statField(filepath.Join(dir, "memory.stat"), "inactive_file")
	r.memUsed = max(readInt(filepath.Join(dir, "memory.current"))-r.cache, 0)
	r.limit = readInt(filepath.Join(dir, "memory.max")) // "max" reads 0
	return r, nil
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n
}

// statField is the value of key in a "key value" per line file.
func statField(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
