package e2b

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/manager"
)

// Store is the database the sandbox records live in: the audit database
// (*audit.SQLite or *audit.Postgres), as for DeerFlow's sandboxes and the
// session records. On PostgreSQL every replica of a fleet reads the same
// rows, so a sandbox made through one replica is known to all of them.
type Store interface {
	Migrate(ctx context.Context, component string, migs []audit.Migration) error
	DB() *sql.DB
	WriteTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error
	Rebind(query string) string
}

// record is what outlives the process serving a sandbox: everything but
// its live processes and the code contexts naming its (live) kernel. The
// tokens are kept as their SHA-256 only: a replica that did not mint them
// can check them but not show them again (connect then mints new ones).
type record struct {
	id, tenant, sessionKey string
	template, client       string
	principal              manager.Principal
	envs                   map[string]string
	envdSum, trafficSum    [sha256.Size]byte
}

// records is where the registry keeps its records: the store, or (no
// database: unit tests) this process's memory.
type records interface {
	put(ctx context.Context, rec record) error
	get(ctx context.Context, id string) (record, bool, error)
	remove(ctx context.Context, id string) error
	removeSession(ctx context.Context, key string) error
}

// storeComponent names the table's migrations in schema_migrations.
const storeComponent = "e2b"

// storeMigrations is the e2b_sandboxes table's history. Append; never edit.
var storeMigrations = []audit.Migration{{
	Version:  1,
	Name:     "create e2b sandboxes",
	SQL:      sandboxesV1 + " STRICT;\n" + sandboxesV1Index,
	Postgres: sandboxesV1 + ";\n" + sandboxesV1Index,
}}

// A sandbox id is a fresh random name the gateway gave it (or its fork),
// unique across tenants: the sandbox routes find it by id alone, then
// check its token.
const sandboxesV1 = `CREATE TABLE e2b_sandboxes (
	sandbox_id     TEXT NOT NULL PRIMARY KEY,
	tenant         TEXT NOT NULL,
	session_key    TEXT NOT NULL,
	template       TEXT NOT NULL,
	client         TEXT NOT NULL,
	principal_role TEXT NOT NULL,
	principal_name TEXT NOT NULL,
	envs           TEXT NOT NULL,
	envd_sha256    TEXT NOT NULL,
	traffic_sha256 TEXT NOT NULL,
	updated_at     TEXT NOT NULL
)`

const sandboxesV1Index = `CREATE INDEX e2b_sandboxes_session_key ON e2b_sandboxes (session_key);`

// sqlRecords is records in the store.
type sqlRecords struct{ db Store }

func (s sqlRecords) put(ctx context.Context, rec record) error {
	envs, err := json.Marshal(rec.envs)
	if err != nil {
		return fmt.Errorf("e2b: encode envs: %w", err)
	}
	err = s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO e2b_sandboxes (sandbox_id, tenant, session_key, template, client,
	principal_role, principal_name, envs, envd_sha256, traffic_sha256, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (sandbox_id) DO UPDATE SET tenant = excluded.tenant, session_key = excluded.session_key,
	template = excluded.template, client = excluded.client, principal_role = excluded.principal_role,
	principal_name = excluded.principal_name, envs = excluded.envs, envd_sha256 = excluded.envd_sha256,
	traffic_sha256 = excluded.traffic_sha256, updated_at = excluded.updated_at`),
			rec.id, rec.tenant, rec.sessionKey, rec.template, rec.client, rec.principal.Role, rec.principal.Name,
			string(envs), hex.EncodeToString(rec.envdSum[:]), hex.EncodeToString(rec.trafficSum[:]),
			time.Now().UTC().Format(time.RFC3339Nano))
		return err
	})
	if err != nil {
		return fmt.Errorf("e2b: register a sandbox: %w", err)
	}
	return nil
}

func (s sqlRecords) get(ctx context.Context, id string) (record, bool, error) {
	var rec record
	var envs, envdSum, trafficSum string
	err := s.db.DB().QueryRowContext(ctx, s.db.Rebind(`SELECT sandbox_id, tenant, session_key, template, client,
	principal_role, principal_name, envs, envd_sha256, traffic_sha256 FROM e2b_sandboxes WHERE sandbox_id = ?`), id).
		Scan(&rec.id, &rec.tenant, &rec.sessionKey, &rec.template, &rec.client, &rec.principal.Role, &rec.principal.Name,
			&envs, &envdSum, &trafficSum)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return record{}, false, nil
	case err != nil:
		return record{}, false, fmt.Errorf("e2b: read the sandbox registry: %w", err)
	}
	rec.principal.Tenant = rec.tenant
	if err := json.Unmarshal([]byte(envs), &rec.envs); err != nil {
		return record{}, false, fmt.Errorf("e2b: decode envs: %w", err)
	}
	if !unhex(rec.envdSum[:], envdSum) || !unhex(rec.trafficSum[:], trafficSum) {
		return record{}, false, errors.New("e2b: a token digest in the registry is malformed")
	}
	return rec, true, nil
}

func unhex(dst []byte, s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && copy(dst, b) == len(dst) && len(b) == len(dst)
}

func (s sqlRecords) remove(ctx context.Context, id string) error {
	return s.exec(ctx, `DELETE FROM e2b_sandboxes WHERE sandbox_id = ?`, id)
}

func (s sqlRecords) removeSession(ctx context.Context, key string) error {
	return s.exec(ctx, `DELETE FROM e2b_sandboxes WHERE session_key = ?`, key)
}

func (s sqlRecords) exec(ctx context.Context, query string, args ...any) error {
	err := s.db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(query), args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("e2b: forget sandboxes: %w", err)
	}
	return nil
}

// memRecords is records in this process's memory.
type memRecords struct {
	mu   sync.Mutex
	byID map[string]record
}

func (m *memRecords) put(_ context.Context, rec record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byID[rec.id] = rec
	return nil
}

func (m *memRecords) get(_ context.Context, id string) (record, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.byID[id]
	return rec, ok, nil
}

func (m *memRecords) remove(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byID, id)
	return nil
}

func (m *memRecords) removeSession(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, rec := range m.byID {
		if rec.sessionKey == key {
			delete(m.byID, id)
		}
	}
	return nil
}
