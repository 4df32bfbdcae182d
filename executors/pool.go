package executors

// PoolStatus is what an executor with a pool of pre-started sandboxes
// that belong to no session until a run claims one (issue 34) shows in
// /readyz and the metrics.
type PoolStatus struct {
	// Enabled is false with Reason when the pool cannot serve (not root,
	// disabled by configuration, no slot directory).
	Enabled bool   `json:"enabled"`
	Reason  string `json:"reason,omitempty"`
	// Idle sandboxes are ready to claim, Preparing are being started;
	// Size is kept idle per shape when sessions arrive slowly, Max bounds
	// them all, Shapes are the shapes pooled now.
	Idle      int `json:"idle"`
	Preparing int `json:"preparing"`
	Size      int `json:"size"`
	Max       int `json:"max"`
	Shapes    int `json:"shapes"`
	// Claims were served from the pool, Misses found none ready (the run
	// started a container of its own), Made sandboxes were started, Lost
	// died waiting.
	Claims int64 `json:"claims"`
	Misses int64 `json:"misses"`
	Made   int64 `json:"made"`
	Lost   int64 `json:"lost"`
}

// Pooler is an executor with such a pool.
type Pooler interface {
	PoolStatus() PoolStatus
}
