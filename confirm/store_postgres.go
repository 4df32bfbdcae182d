package confirm

// approvalsTableV1 is the approvals table of migration 1, the same on both
// drivers (SQLite adds STRICT).
const approvalsTableV1 = `
CREATE TABLE approvals (
	id              TEXT    PRIMARY KEY,
	request_id      TEXT    NOT NULL,
	session_id      TEXT    NOT NULL,
	language        TEXT    NOT NULL,
	code_sha256     TEXT    NOT NULL,
	digest          TEXT    NOT NULL,
	risk_level      TEXT    NOT NULL DEFAULT '',
	executor        TEXT    NOT NULL DEFAULT '',
	policy_revision TEXT    NOT NULL DEFAULT '',
	principal       TEXT    NOT NULL DEFAULT '',
	status          TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'timeout', 'withdrawn', 'interrupted')),
	requested_at    TEXT    NOT NULL,
	deadline        TEXT    NOT NULL,
	decided_by      TEXT    NOT NULL DEFAULT '',
	reason          TEXT    NOT NULL DEFAULT '',
	decided_at      TEXT
)`

// The approvals table in PostgreSQL, version for version with the SQLite
// history in storeMigrations. Times are the same fixed-width UTC text as
// on SQLite, so one scanner serves both. The single-use rule is a trigger
// function: once a row leaves 'pending' it never changes again, and its
// binding columns never change at all. (PostgreSQL has no INSERT OR
// REPLACE, and ON CONFLICT DO UPDATE fires the UPDATE trigger, so the
// primary key alone keeps ids from being reused.)
const pgApprovalsV1 = approvalsTableV1 + `;
CREATE INDEX approvals_status ON approvals (status);
CREATE INDEX approvals_decided_at ON approvals (decided_at);
CREATE FUNCTION approvals_single_use() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.status <> 'pending'
	   OR NEW.id IS DISTINCT FROM OLD.id OR NEW.request_id IS DISTINCT FROM OLD.request_id
	   OR NEW.session_id IS DISTINCT FROM OLD.session_id OR NEW.language IS DISTINCT FROM OLD.language
	   OR NEW.code_sha256 IS DISTINCT FROM OLD.code_sha256 OR NEW.digest IS DISTINCT FROM OLD.digest
	   OR NEW.requested_at IS DISTINCT FROM OLD.requested_at OR NEW.deadline IS DISTINCT FROM OLD.deadline THEN
		RAISE EXCEPTION 'an approval is single-use and bound to its request';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER approvals_single_use BEFORE UPDATE ON approvals
	FOR EACH ROW EXECUTE FUNCTION approvals_single_use();`

// pgApprovalsV2 adds the tenant (issue 14) and binds it like the session.
const pgApprovalsV2 = `
ALTER TABLE approvals ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
CREATE INDEX approvals_tenant_decided_at ON approvals (tenant, decided_at);
CREATE OR REPLACE FUNCTION approvals_single_use() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.status <> 'pending'
	   OR NEW.id IS DISTINCT FROM OLD.id OR NEW.request_id IS DISTINCT FROM OLD.request_id
	   OR NEW.session_id IS DISTINCT FROM OLD.session_id OR NEW.tenant IS DISTINCT FROM OLD.tenant
	   OR NEW.language IS DISTINCT FROM OLD.language
	   OR NEW.code_sha256 IS DISTINCT FROM OLD.code_sha256 OR NEW.digest IS DISTINCT FROM OLD.digest
	   OR NEW.requested_at IS DISTINCT FROM OLD.requested_at OR NEW.deadline IS DISTINCT FROM OLD.deadline THEN
		RAISE EXCEPTION 'an approval is single-use and bound to its request';
	END IF;
	RETURN NEW;
END
$$;`
