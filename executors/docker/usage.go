package docker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/executors"
)

var _ executors.SessionMeter = (*Executor)(nil)

// SessionUsage reads the cgroups of the session's live containers (one
// reading each, no second one for a rate: the caller keeps the previous
// reading).
func (e *Executor) SessionUsage(ctx context.Context, sessionID string) (executors.Usage, error) {
	u := executors.Usage{CPUs: e.cfg.CPUs}
	if sessionID == "" {
		return u, nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.EngineTimeout)
	defer cancel()
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{
		Filters: e.instanceFilter().Add("label", labelSession+"="+sessionID)})
	if err != nil {
		return u, e.engineError(ctx, "list", err)
	}
	ids := make(map[string]bool, len(list.Items)+1)
	for _, c := range list.Items {
		_, holder := c.Labels[labelNetHolder]
		ids[c.ID] = !holder
	}
	// A session sandbox claimed from the pool was labelled before it had
	// a session (labels are fixed at creation): it is the session's all
	// the same.
	if id := e.sandboxes.containerOf(sessionID); id != "" {
		ids[id] = true
	}
	for id, ownLimit := range ids {
		r, err := e.reading(ctx, id)
		if err != nil {
			continue // it ended between the list and the read
		}
		u.Sandboxes++
		u.CPUNanos += r.cpuNanos
		u.MemUsed += r.memUsed
		u.MemCache += r.cache
		if ownLimit {
			u.MemLimit = max(u.MemLimit, r.limit)
		}
	}
	return u, nil
}

// reading is a container's cgroup counters: its cgroup's files, or the
// engine's stats where the files cannot be read (the engine on another
// host).
func (e *Executor) reading(ctx context.Context, id string) (cgroupReading, error) {
	in, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return cgroupReading{}, err
	}
	if st := in.Container.State; st != nil && st.Pid > 0 {
		if r, err := readCgroup(st.Pid); err == nil && r.limit > 0 {
			return r, nil
		}
	}
	s, err := e.stats(ctx, id)
	if err != nil {
		return cgroupReading{}, err
	}
	cache := s.MemoryStats.Stats["inactive_file"]
	if v, ok := s.MemoryStats.Stats["total_inactive_file"]; ok { // cgroup v1
		cache = v
	}
	return cgroupReading{cpuNanos: s.CPUStats.CPUUsage.TotalUsage, cache: int64(cache),
		memUsed: max(int64(s.MemoryStats.Usage)-int64(cache), 0), limit: int64(s.MemoryStats.Limit)}, nil
}

func (e *Executor) stats(ctx context.Context, id string) (container.StatsResponse, error) {
	var s container.StatsResponse
	r, err := e.cli.ContainerStats(ctx, id, client.ContainerStatsOptions{Stream: false})
	if err != nil {
		return s, err
	}
	defer r.Body.Close()
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("docker: stats: %w", err)
	}
	return s, nil
}
