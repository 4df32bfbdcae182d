package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/fleet"
	"github.com/sandgate/sandgate/manager"
)

// openStorage opens the database storage.driver names: the embedded SQLite
// file under data_dir (one process), or the PostgreSQL database the DSN
// names (a fleet). Audit records and approvals live there either way.
func (gw *gateway) openStorage(ctx context.Context) (audit.Database, error) {
	opts := audit.Options{Logger: gw.log, Synchronous: gw.cfg.Audit.Synchronous, Replica: replicaName(gw.cfg.Storage)}
	if gw.cfg.Storage.Driver == audit.DriverPostgres {
		// OpenPostgres logs and reports the database by host, port,
		// name and user, never by the DSN, which may hold a password.
		return audit.OpenPostgres(ctx, gw.cfg.Storage.DSN, opts)
	}
	return audit.Open(ctx, filepath.Join(gw.cfg.DataDir, "audit", "audit.db"), opts)
}

// replicaName is storage.replica, or its default: "local" for the one
// process of an SQLite gateway, the host name in a PostgreSQL fleet.
func replicaName(c StorageConfig) string {
	if c.Replica != "" {
		return c.Replica
	}
	if c.Driver == audit.DriverPostgres {
		if h, err := os.Hostname(); err == nil && h != "" {
			return h
		}
	}
	return audit.DefaultReplica
}

// resolveInterrupted closes the write-ahead records this replica left
// started when it last stopped without completing them (kill -9, a crash):
// the work they describe may have run, and the log says so.
func (gw *gateway) resolveInterrupted(ctx context.Context) error {
	n, err := gw.audit.ResolveStarted(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		gw.log.WarnContext(ctx, "audit records left started by the previous run resolved as interrupted",
			"records", n, "replica", replicaName(gw.cfg.Storage))
	}
	return nil
}

// listenDSN is the approval hub's LISTEN connection: the storage DSN on
// postgres (decisions taken on other replicas release requests held
// here), none on sqlite.
func (gw *gateway) listenDSN() string {
	if gw.cfg.Storage.Driver == audit.DriverPostgres {
		return gw.cfg.Storage.DSN
	}
	return ""
}

// joinFleet registers this replica (postgres only) before it touches its
// own leftovers, so that a live duplicate of its name is refused rather
// than having its records resolved under it.
func (gw *gateway) joinFleet(ctx context.Context) error {
	pg, ok := gw.audit.(*audit.Postgres)
	if !ok {
		return nil
	}
	reg, err := fleet.Register(ctx, pg, fleet.Options{Replica: replicaName(gw.cfg.Storage), Lease: gw.cfg.Storage.Lease, Logger: gw.log})
	if err != nil {
		return err
	}
	gw.replicas = reg
	// A session may move to another replica when its owner dies; its
	// files must be there.
	return fleet.CheckShared(ctx, pg, filepath.Join(gw.cfg.DataDir, "workspaces"))
}

// watchFleet starts cleaning up after replicas whose lease expires: their
// pending approvals and their started audit records end as interrupted.
func (gw *gateway) watchFleet() {
	if gw.replicas == nil {
		return
	}
	pg := gw.audit.(*audit.Postgres)
	gw.replicas.Run(func(ctx context.Context, replica string) error {
		if gw.hub != nil {
			if _, err := gw.hub.InterruptReplica(ctx, replica); err != nil {
				return fmt.Errorf("interrupt approvals: %w", err)
			}
		}
		if _, err := pg.ResolveStartedOf(ctx, replica); err != nil {
			return fmt.Errorf("resolve audit records: %w", err)
		}
		return nil
	})
}

// sessionRouter is the session router of a fleet (postgres): requests for
// a session another live replica owns are forwarded there. nil on sqlite.
func (gw *gateway) sessionRouter(ctx context.Context) (*fleet.Router, error) {
	if gw.replicas == nil {
		return nil, nil
	}
	return fleet.NewRouter(ctx, gw.replicas, gw.log)
}

// advertise publishes where the other replicas forward this one's
// sessions: storage.advertise_url, or the bound listener.
func (gw *gateway) advertise(ctx context.Context) error {
	if gw.replicas == nil {
		return nil
	}
	u := gw.cfg.Storage.AdvertiseURL
	if u == "" {
		host, port, err := net.SplitHostPort(gw.Addr())
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			if host, err = os.Hostname(); err != nil {
				return fmt.Errorf("advertise url: %w (set storage.advertise_url)", err)
			}
		}
		u = "http://" + net.JoinHostPort(host, port)
	}
	gw.log.InfoContext(ctx, "fleet member", "replica", gw.replicas.Name(), "url", u)
	return gw.replicas.SetURL(ctx, strings.TrimSuffix(u, "/"))
}

// leaveGrace is how long a replica that left the registry keeps its
// listener and connections open: the other replicas read the registry
// before each forward, so what reaches it after this is only a forward
// whose read came just before the leave. Without it, a forward racing
// the shutdown's close of idle connections would fail.
const leaveGrace = 500 * time.Millisecond

// leaveFleet removes this replica from the registry (idempotent) and
// waits leaveGrace the first time.
func (gw *gateway) leaveFleet(ctx context.Context) {
	if gw.replicas == nil {
		return
	}
	if err := gw.replicas.Stop(ctx); err != nil {
		gw.log.Warn("leave the replica registry", "err", err)
	}
	gw.leaveOnce.Do(func() {
		if gw.server == nil {
			return // never served
		}
		select {
		case <-time.After(leaveGrace):
		case <-ctx.Done():
		}
	})
}

// approvalPeer lets the approval hub show this replica's approvers the
// requests waiting on the other replicas (postgres): it fetches each from
// its replica through the router. nil on sqlite.
func (gw *gateway) approvalPeer() confirm.Peer {
	if gw.router == nil {
		return nil
	}
	router := gw.router
	return func(ctx context.Context, replica, id string) (confirm.View, error) {
		raw, err := router.PeerApproval(ctx, replica, id)
		if err != nil {
			return confirm.View{}, err
		}
		var v confirm.View
		if err := json.Unmarshal(raw, &v); err != nil {
			return confirm.View{}, fmt.Errorf("approval from replica %q: %w", replica, err)
		}
		return v, nil
	}
}

// placement is the manager's view of the fleet's session registry (nil
// on sqlite: every session is served here).
func (gw *gateway) placement() manager.Placement {
	if gw.replicas == nil {
		return nil
	}
	return registryPlacement{gw.replicas}
}

type registryPlacement struct{ reg *fleet.Registry }

func (p registryPlacement) Claim(ctx context.Context, key string) (manager.Owner, error) {
	o, err := p.reg.Claim(ctx, key)
	return manager.Owner{Local: o.Local, Replica: o.Replica, URL: o.URL, AdoptedFrom: o.AdoptedFrom}, err
}

func (p registryPlacement) Release(ctx context.Context, key string) error {
	return p.reg.Release(ctx, key)
}

func (p registryPlacement) Name() string { return p.reg.Name() }
