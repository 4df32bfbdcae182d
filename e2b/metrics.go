package e2b

import (
	"net/http"
	"time"

	"github.com/sandgate/sandgate/manager"
)

// metricView is E2B's SandboxMetric.
type metricView struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// getMetrics answers GET /sandboxes/{id}/metrics (the SDK's getMetrics)
// with one reading taken now from the cgroups of the sandbox's live
// containers (manager.SessionUsage): E2B keeps a history sampled every
// few seconds and filters it by ?start= and ?end=; sandgate keeps none,
// so the answer is the current reading whatever the range. Memory is
// what the containers use, page cache apart, against one container's
// limit (the policy's memory_mb); disk is the workspace against its
// quota; a sandbox with nothing running reads zero CPU and memory.
func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request, p manager.Principal) error {
	info, err := s.session(r, p, r.PathValue("id"))
	if err != nil {
		return err
	}
	u, err := s.deps.Manager.SessionUsage(r.Context(), p, info.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, []metricView{{
		Timestamp: u.Timestamp.UTC(), TimestampUnix: u.Timestamp.Unix(), CPUCount: u.CPUCount, CPUUsedPct: u.CPUUsedPct,
		MemUsed: u.MemUsed, MemTotal: u.MemTotal, MemCache: u.MemCache, DiskUsed: u.DiskUsed, DiskTotal: u.DiskTotal,
	}})
	return nil
}
