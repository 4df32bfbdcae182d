package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/sandgate/sandgate/audit"
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
