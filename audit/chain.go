package audit

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Hash chain. Every record belongs to its replica's chain (Options.Replica)
// and holds two digests:
//
//   - hash = SHA-256(prev_hash "\n" header), where header is what is known
//     when the record is first written (request, time, principal, session,
//     code digest, risk, decision, approval, ...) and prev_hash is the hash
//     of the replica's previous record ("" for its first);
//   - completion_hash = SHA-256(hash "\n" completion), where completion is
//     what a write-ahead record only learns at the end (outcome, exit code,
//     duration, ...). Completing a started record rewrites completion_hash
//     only, so the chain links never change after insertion.
//
// Verify recomputes both for every record in id order and names the first
// record whose digest or link does not match: an edited field, a deleted
// record (its successor's prev_hash no longer matches) or a reordered one.
// The chain shows tampering by anyone who cannot also recompute every later
// hash; it does not stop someone who owns the database and rewrites the
// whole chain (compare a chain head kept elsewhere for that).

// chainRow is a record as stored: the JSON columns as their text.
type chainRow struct {
	ID int64

	RequestID, Time, Kind, Tenant, SessionID, Principal, Language, CodeSHA256 string
	CodeBytes                                                                 int64
	RiskLevel                                                                 string
	RiskPatterns                                                              sql.NullString
	Action, PolicyRevision                                                    string
	Approval                                                                  sql.NullString
	Path, Replica                                                             string
	DecisionID, WouldBe                                                       string

	Outcome, ErrorCode     string
	ExitCode               sql.NullInt64
	DurationMS, HTTPStatus int64
	Executor               string
	Reasons                sql.NullString
	Bytes                  int64
	Detail                 sql.NullString

	PrevHash, Hash, CompletionHash string
}

// rowOf is rec as it will be stored at time t by replica.
func rowOf(rec *Record, cols jsonColumns, t, replica string) chainRow {
	ns := func(v any) sql.NullString {
		s, ok := v.(string)
		return sql.NullString{String: s, Valid: ok}
	}
	r := chainRow{
		RequestID: rec.RequestID, Time: t, Kind: rec.Kind, Tenant: rec.Tenant, SessionID: rec.SessionID,
		Principal: rec.Principal, Language: rec.Language, CodeSHA256: rec.CodeSHA256, CodeBytes: int64(rec.CodeBytes),
		RiskLevel: rec.RiskLevel, RiskPatterns: ns(cols.riskPatterns), Action: rec.Action,
		PolicyRevision: rec.PolicyRevision, Approval: ns(cols.approval), Path: rec.Path, Replica: replica,
		Outcome: rec.Outcome, ErrorCode: rec.ErrorCode, DurationMS: rec.DurationMS, HTTPStatus: int64(rec.HTTPStatus),
		Executor: rec.Executor, Reasons: ns(cols.reasons), Bytes: rec.Bytes, Detail: ns(cols.detail),
		DecisionID: rec.DecisionID, WouldBe: rec.WouldBe,
	}
	if rec.ExitCode != nil {
		r.ExitCode = sql.NullInt64{Int64: int64(*rec.ExitCode), Valid: true}
	}
	return r
}

func nullable(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

// headerHash is the record's link in its chain. DecisionID and WouldBe
// came later (audit migration 4): they are hashed only when set, so a
// record written before them (both empty) hashes as it always did and
// old chains still verify, while blanking either in a record that had it
// breaks the link.
func (r *chainRow) headerHash(prev string) string {
	h := struct {
		RequestID, Time, Kind, Tenant, SessionID, Principal, Language, CodeSHA256 string
		CodeBytes                                                                 int64
		RiskLevel                                                                 string
		RiskPatterns                                                              *string
		Action, PolicyRevision                                                    string
		Approval                                                                  *string
		Path, Replica                                                             string
		DecisionID                                                                string `json:",omitempty"`
		WouldBe                                                                   string `json:",omitempty"`
	}{r.RequestID, r.Time, r.Kind, r.Tenant, r.SessionID, r.Principal, r.Language, r.CodeSHA256, r.CodeBytes,
		r.RiskLevel, nullable(r.RiskPatterns), r.Action, r.PolicyRevision, nullable(r.Approval), r.Path, r.Replica,
		r.DecisionID, r.WouldBe}
	return digest(prev, h)
}

// completionHash seals the completion fields to the record's link.
func (r *chainRow) completionHash(hash string) string {
	var exit *int64
	if r.ExitCode.Valid {
		exit = &r.ExitCode.Int64
	}
	c := struct {
		Outcome, ErrorCode     string
		ExitCode               *int64
		DurationMS, HTTPStatus int64
		Executor               string
		Reasons                *string
		Bytes                  int64
		Detail                 *string
	}{r.Outcome, r.ErrorCode, exit, r.DurationMS, r.HTTPStatus, r.Executor, nullable(r.Reasons), r.Bytes, nullable(r.Detail)}
	return digest(hash, c)
}

func digest(prev string, v any) string {
	b, err := json.Marshal(v)
	if err != nil { // plain strings and integers only
		panic(err)
	}
	sum := sha256.Sum256(append([]byte(prev+"\n"), b...))
	return hex.EncodeToString(sum[:])
}

// seal sets the row's chain digests after prev.
func (r *chainRow) seal(prev string) {
	r.PrevHash = prev
	r.Hash = r.headerHash(prev)
	r.CompletionHash = r.completionHash(r.Hash)
}

const chainColumns = `id, request_id, time, kind, tenant, session_id, principal, language, code_sha256, code_bytes,
	risk_level, risk_patterns, action, policy_revision, approval, path, replica,
	outcome, error_code, exit_code, duration_ms, http_status, executor, reasons, bytes, detail,
	prev_hash, hash, completion_hash, decision_id, would_be`

func scanChainRow(sc interface{ Scan(...any) error }) (chainRow, error) {
	var r chainRow
	err := sc.Scan(&r.ID, &r.RequestID, &r.Time, &r.Kind, &r.Tenant, &r.SessionID, &r.Principal, &r.Language,
		&r.CodeSHA256, &r.CodeBytes, &r.RiskLevel, &r.RiskPatterns, &r.Action, &r.PolicyRevision, &r.Approval,
		&r.Path, &r.Replica, &r.Outcome, &r.ErrorCode, &r.ExitCode, &r.DurationMS, &r.HTTPStatus, &r.Executor,
		&r.Reasons, &r.Bytes, &r.Detail, &r.PrevHash, &r.Hash, &r.CompletionHash, &r.DecisionID, &r.WouldBe)
	return r, err
}

// BrokenLink is the first record of a chain that does not verify.
type BrokenLink struct {
	Replica string `json:"replica"`
	ID      int64  `json:"id"`
	Reason  string `json:"reason"`
}

func (b BrokenLink) String() string {
	return fmt.Sprintf("replica %q: record %d: %s", b.Replica, b.ID, b.Reason)
}

// ChainReport is what Verify found: records checked per replica and the
// first broken link of each broken chain.
type ChainReport struct {
	Records map[string]int `json:"records"`
	Broken  []BrokenLink   `json:"broken,omitempty"`
}

// Verify checks every replica's chain in db (only replica's, when it is
// not empty). Records written before chaining (an empty hash at the start
// of a chain, from a database older than this schema) are counted but not
// checked; an empty hash after a chained record is a break.
func Verify(ctx context.Context, db Database, replica string) (ChainReport, error) {
	q := `SELECT ` + chainColumns + ` FROM records`
	var args []any
	if replica != "" {
		q += ` WHERE replica = ?`
		args = append(args, replica)
	}
	q += ` ORDER BY replica, id`
	rows, err := db.DB().QueryContext(ctx, db.Rebind(q), args...)
	if err != nil {
		return ChainReport{}, fmt.Errorf("audit: verify: %w", err)
	}
	defer rows.Close()
	rep := ChainReport{Records: map[string]int{}}
	type state struct {
		prev    string
		chained bool
		broken  bool
	}
	chains := map[string]*state{}
	for rows.Next() {
		r, err := scanChainRow(rows)
		if err != nil {
			return rep, fmt.Errorf("audit: verify: %w", err)
		}
		rep.Records[r.Replica]++
		st := chains[r.Replica]
		if st == nil {
			st = &state{}
			chains[r.Replica] = st
		}
		if st.broken {
			continue
		}
		if reason := checkLink(&r, st.prev, st.chained); reason != "" {
			st.broken = true
			rep.Broken = append(rep.Broken, BrokenLink{Replica: r.Replica, ID: r.ID, Reason: reason})
			continue
		}
		if r.Hash != "" {
			st.chained, st.prev = true, r.Hash
		}
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("audit: verify: %w", err)
	}
	return rep, nil
}

// checkLink is one link: "" when r follows prev and its digests match.
func checkLink(r *chainRow, prev string, chained bool) string {
	switch {
	case r.Hash == "" && !chained:
		return "" // written before chaining
	case r.Hash == "":
		return "hash missing after a chained record"
	case r.PrevHash != prev:
		return "prev_hash does not match the previous record's hash (a record was removed, inserted or reordered)"
	case r.headerHash(prev) != r.Hash:
		return "hash does not match the record's contents (request, principal, decision, decision_id or approval edited)"
	case r.completionHash(r.Hash) != r.CompletionHash:
		return "completion_hash does not match the record's outcome fields (outcome, exit code or duration edited)"
	}
	return ""
}
