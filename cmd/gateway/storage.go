package main

import (
	"context"
	"path/filepath"

	"github.com/sandgate/sandgate/audit"
)

// openStorage opens the database storage.driver names: the embedded SQLite
// file under data_dir (one process), or the PostgreSQL database the DSN
// names (a fleet). Audit records and approvals live there either way.
func (gw *gateway) openStorage(ctx context.Context) (audit.Database, error) {
	opts := audit.Options{Logger: gw.log, Synchronous: gw.cfg.Audit.Synchronous}
	if gw.cfg.Storage.Driver == audit.DriverPostgres {
		// OpenPostgres logs and reports the database by host, port,
		// name and user, never by the DSN, which may hold a password.
		return audit.OpenPostgres(ctx, gw.cfg.Storage.DSN, opts)
	}
	return audit.Open(ctx, filepath.Join(gw.cfg.DataDir, "audit", "audit.db"), opts)
}
