package audit

// The records table in PostgreSQL, version for version with the SQLite
// history in auditMigrations.
//
// Times are fixed-width UTC text as in SQLite, so both drivers share one
// scanner and the column sorts in time order; the JSON columns are text
// (checked to parse as JSON) so a record reads back byte for byte as it
// was written. Triggers refuse UPDATE, DELETE and TRUNCATE whatever role
// issues them; like SQLite's, they guard against mistakes, not against
// someone who owns the database.
const pgRecordsV1 = `
CREATE TABLE records (
	id              BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	request_id      TEXT    NOT NULL DEFAULT '',
	time            TEXT    NOT NULL,
	kind            TEXT    NOT NULL CHECK (kind <> ''),
	session_id      TEXT    NOT NULL DEFAULT '',
	principal       TEXT    NOT NULL DEFAULT '',
	language        TEXT    NOT NULL DEFAULT '',
	code_sha256     TEXT    NOT NULL DEFAULT '',
	code_bytes      BIGINT  NOT NULL DEFAULT 0,
	risk_level      TEXT    NOT NULL DEFAULT '',
	risk_patterns   TEXT    CHECK (risk_patterns IS NULL OR risk_patterns::jsonb IS NOT NULL),
	action          TEXT    NOT NULL DEFAULT '',
	executor        TEXT    NOT NULL DEFAULT '',
	reasons         TEXT    CHECK (reasons IS NULL OR reasons::jsonb IS NOT NULL),
	policy_revision TEXT    NOT NULL DEFAULT '',
	approval        TEXT    CHECK (approval IS NULL OR approval::jsonb IS NOT NULL),
	outcome         TEXT    NOT NULL CHECK (outcome <> ''),
	error_code      TEXT    NOT NULL DEFAULT '',
	exit_code       BIGINT,
	duration_ms     BIGINT  NOT NULL DEFAULT 0,
	http_status     BIGINT  NOT NULL DEFAULT 0,
	path            TEXT    NOT NULL DEFAULT '',
	bytes           BIGINT  NOT NULL DEFAULT 0,
	detail          TEXT    CHECK (detail IS NULL OR detail::jsonb IS NOT NULL)
);
CREATE INDEX records_session_id_id ON records (session_id, id);
CREATE INDEX records_kind_id ON records (kind, id);
CREATE FUNCTION records_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'audit records are append-only';
END
$$;
CREATE TRIGGER records_no_update_delete BEFORE UPDATE OR DELETE ON records
	FOR EACH ROW EXECUTE FUNCTION records_append_only();
CREATE TRIGGER records_no_truncate BEFORE TRUNCATE ON records
	FOR EACH STATEMENT EXECUTE FUNCTION records_append_only();`

const pgRecordsV2 = `
ALTER TABLE records ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
CREATE INDEX records_tenant_id ON records (tenant, id);
CREATE INDEX records_tenant_session_id_id ON records (tenant, session_id, id);`

// pgRecordsV3: write-ahead records and hash chains; see auditMigrations.
const pgRecordsV3 = `
ALTER TABLE records ADD COLUMN replica TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN hash TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN completion_hash TEXT NOT NULL DEFAULT '';
CREATE INDEX records_replica_id ON records (replica, id);
CREATE INDEX records_started ON records (replica, id) WHERE outcome = 'started';
CREATE FUNCTION records_complete_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' OR OLD.outcome <> 'started' OR NEW.outcome = 'started'
	   OR (NEW.id, NEW.request_id, NEW.time, NEW.kind, NEW.tenant, NEW.session_id, NEW.principal, NEW.language,
	       NEW.code_sha256, NEW.code_bytes, NEW.risk_level, NEW.risk_patterns, NEW.action, NEW.policy_revision,
	       NEW.approval, NEW.path, NEW.replica, NEW.prev_hash, NEW.hash)
	   IS DISTINCT FROM
	      (OLD.id, OLD.request_id, OLD.time, OLD.kind, OLD.tenant, OLD.session_id, OLD.principal, OLD.language,
	       OLD.code_sha256, OLD.code_bytes, OLD.risk_level, OLD.risk_patterns, OLD.action, OLD.policy_revision,
	       OLD.approval, OLD.path, OLD.replica, OLD.prev_hash, OLD.hash) THEN
		RAISE EXCEPTION 'audit records are append-only';
	END IF;
	RETURN NEW;
END
$$;
DROP TRIGGER records_no_update_delete ON records;
CREATE TRIGGER records_no_update_delete BEFORE UPDATE OR DELETE ON records
	FOR EACH ROW EXECUTE FUNCTION records_complete_only();`

// pgRecordsV4: decision_id and would_be; see auditMigrations. The
// completion guard is the V3 function with the two columns added.
const pgRecordsV4 = `
ALTER TABLE records ADD COLUMN decision_id TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN would_be TEXT NOT NULL DEFAULT '';
CREATE INDEX records_decision_id ON records (decision_id) WHERE decision_id <> '';
CREATE OR REPLACE FUNCTION records_complete_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' OR OLD.outcome <> 'started' OR NEW.outcome = 'started'
	   OR (NEW.id, NEW.request_id, NEW.time, NEW.kind, NEW.tenant, NEW.session_id, NEW.principal, NEW.language,
	       NEW.code_sha256, NEW.code_bytes, NEW.risk_level, NEW.risk_patterns, NEW.action, NEW.policy_revision,
	       NEW.approval, NEW.path, NEW.replica, NEW.prev_hash, NEW.hash, NEW.decision_id, NEW.would_be)
	   IS DISTINCT FROM
	      (OLD.id, OLD.request_id, OLD.time, OLD.kind, OLD.tenant, OLD.session_id, OLD.principal, OLD.language,
	       OLD.code_sha256, OLD.code_bytes, OLD.risk_level, OLD.risk_patterns, OLD.action, OLD.policy_revision,
	       OLD.approval, OLD.path, OLD.replica, OLD.prev_hash, OLD.hash, OLD.decision_id, OLD.would_be) THEN
		RAISE EXCEPTION 'audit records are append-only';
	END IF;
	RETURN NEW;
END
$$;`

const pgSchemaMigrationsDDL = `CREATE TABLE IF NOT EXISTS schema_migrations (
	component  TEXT    NOT NULL,
	version    INTEGER NOT NULL,
	name       TEXT    NOT NULL,
	applied_at TEXT    NOT NULL,
	PRIMARY KEY (component, version)
)`
