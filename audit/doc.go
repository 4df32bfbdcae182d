// Package audit is sandgate's append-only log of decisions and outcomes.
//
// Every request the gateway handles (run_code, execute, file operations,
// browser navigation, policy reloads, ...) produces exactly one [Record],
// whatever its outcome: allowed and run, denied by policy, refused by an
// approver, timed out, invalid, or failed inside the gateway. The manager
// appends the record before the HTTP response is written, so a client never
// sees a result that was not audited first.
//
// # What is stored, and what never is
//
// A record holds metadata about the request and the decision: request and
// session ids, the principal (role and token name), the language, the SHA-256
// and size of the code, the risk level and pattern ids, the policy action,
// executor, reasons and revision, the approval, the outcome, exit code,
// duration and HTTP status. It never holds the code, the command, program
// output or a bearer token; the type has no field for any of them, and callers
// must not smuggle them in through [Record.Detail].
//
// # Storage
//
// [SQLite] is the production [Store]: an embedded database (modernc.org/sqlite,
// pure Go) in WAL mode with synchronous=FULL, one serialised writer
// connection and a small read-only pool. Records are immutable: there is no
// update or delete API, and triggers in the database abort any UPDATE or
// DELETE on the records table. Schema changes are versioned migrations
// applied in order by [Open]; other packages that keep state in the same
// database (pending approvals, for instance) add their own tables with
// [SQLite.Migrate] and write through [SQLite.WriteTx].
//
// [Memory] is an in-memory [Store] for unit tests of packages that depend on
// audit. It is not durable and must never be wired into the gateway.
package audit
