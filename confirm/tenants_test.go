package confirm

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
)

func tenantRequest(tenant, session, code string) Request {
	r := request(session, code)
	r.Tenant, r.RequestID = tenant, "req_"+tenant+"_"+session
	return r
}

// TestTenantScopedApprover: an approver limited to team-a sees and decides
// team-a's approvals only, on the socket and through the hub's API; for it
// team-b's approval does not exist. An unrestricted approver sees both.
func TestTenantScopedApprover(t *testing.T) {
	th := newTestHub(t, HubOptions{})
	c, err := th.dialErr("lead-a", http.Header{"X-Test-Tenants": {"team-a"}})
	if err != nil {
		t.Fatal(err)
	}
	lead := c.start(t)
	all := th.dial(t, "oncall")
	lead.next(EventSnapshot)
	all.next(EventSnapshot)
	leadA := Approver{Name: "lead-a", Role: "approver", Tenants: []string{"team-a"}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a1 := confirmAsync(ctx, th.Hub, tenantRequest("team-a", "demo", "import os"))
	waitPending(t, th.Hub, 1)
	b := confirmAsync(ctx, th.Hub, tenantRequest("team-b", "demo", "import os"))
	waitPending(t, th.Hub, 2)
	a2 := confirmAsync(ctx, th.Hub, tenantRequest("team-a", "other", "import os"))
	pend := waitPending(t, th.Hub, 3)
	idA1, idB, idA2 := pend[0].ID, pend[1].ID, pend[2].ID
	if pend[1].Tenant != "team-b" {
		t.Fatalf("pending %+v", pend)
	}

	// The socket: lead-a's events are team-a's, in order; team-b's is not
	// among them. The unrestricted approver gets all three.
	for _, want := range []string{idA1, idA2} {
		if m := lead.next(EventRequested); m.Approval.ID != want || m.Approval.Tenant != "team-a" {
			t.Fatalf("lead-a got %+v, want %s", m.Approval, want)
		}
	}
	for _, want := range []string{idA1, idB, idA2} {
		if m := all.next(EventRequested); m.Approval.ID != want {
			t.Fatalf("oncall got %s, want %s", m.Approval.ID, want)
		}
	}
	if got := th.PendingFor(leadA); len(got) != 2 || got[0].ID != idA1 || got[1].ID != idA2 {
		t.Fatalf("PendingFor(lead-a) = %+v", got)
	}

	// Deciding team-b's approval: not found, by the API and on the socket,
	// and it stays pending.
	if _, err := th.Decide(context.Background(), idB, leadA, Decision{Decision: "approve"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Decide(team-b) by lead-a: %v", err)
	}
	lead.send(map[string]any{"type": "decide", "ref": "r1", "id": idB, "decision": "approve"})
	if m := lead.next(EventResult); *m.OK || m.Error.Code != "not_found" || m.Approval != nil {
		t.Fatalf("socket decision on team-b's: %s", m.Raw)
	}
	if _, err := th.GetFor(context.Background(), idB, leadA); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetFor(team-b) by lead-a: %v", err)
	}
	if len(th.Pending()) != 3 {
		t.Fatal("team-b's approval was resolved by lead-a's attempt")
	}

	// oncall denies team-b's; lead-a approves team-a's first one. lead-a
	// hears only of its own.
	if _, err := th.Decide(context.Background(), idB, Approver{Name: "oncall", Role: "approver"}, Decision{Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	lead.send(map[string]any{"type": "decide", "ref": "r2", "id": idA1, "decision": "approve"})
	if m := lead.next(EventResult); !*m.OK {
		t.Fatalf("lead-a approving team-a's: %s", m.Raw)
	}
	if m := lead.next(EventResolved); m.Approval.ID != idA1 {
		t.Fatalf("lead-a heard of %s first, want %s", m.Approval.ID, idA1)
	}
	if out := b.wait(t); out.Status != StatusDenied {
		t.Fatalf("team-b's outcome %+v", out)
	}
	if out := a1.wait(t); out.Status != StatusApproved || out.DecidedBy != "lead-a" {
		t.Fatalf("team-a's outcome %+v", out)
	}
	// A resolved approval of team-b: still not found for lead-a, not a
	// conflict that would say who decided it.
	if _, err := th.Decide(context.Background(), idB, leadA, Decision{Decision: "approve"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Decide(resolved team-b) by lead-a: %v", err)
	}

	// History from the database and a new connection's snapshot hold
	// team-a's only.
	recent, err := th.RecentFor(context.Background(), leadA, "", 50)
	if err != nil || len(recent) != 1 || recent[0].ID != idA1 || recent[0].Tenant != "team-a" {
		t.Fatalf("RecentFor(lead-a) = %+v %v", recent, err)
	}
	if all, _ := th.Recent(context.Background(), "", 50); len(all) != 2 {
		t.Fatalf("Recent = %+v", all)
	}
	c2, err := th.dialErr("lead-a", http.Header{"X-Test-Tenants": {"team-a"}})
	if err != nil {
		t.Fatal(err)
	}
	snap := c2.start(t).next(EventSnapshot)
	if len(snap.Pending) != 1 || snap.Pending[0].ID != idA2 || len(snap.History) != 1 || snap.History[0].ID != idA1 ||
		len(snap.Approver.Tenants) != 1 {
		t.Fatalf("lead-a's snapshot: %s", snap.Raw)
	}
	cancel()
	a2.wait(t)
}

// TestStoreMigratesToTenants: an approvals table from before tenants gets
// its tenant column; its rows read back with an empty tenant (seen only by
// unrestricted approvers), and the single-use trigger binds the tenant.
func TestStoreMigratesToTenants(t *testing.T) {
	db, err := audit.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := db.Migrate(ctx, storeComponent, storeMigrations[:1]); err != nil {
		t.Fatal(err)
	}
	err = db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO approvals (id, request_id, session_id, language, code_sha256, digest, status, requested_at, deadline)
			VALUES ('apr_old', 'req_old', 'demo', 'python', 'abc', 'sha256:d', 'pending', ?, ?)`, fmtTime(time.Now()), fmtTime(time.Now()))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	th := newTestHub(t, HubOptions{Store: db})
	old, err := th.Get(ctx, "apr_old")
	if err != nil || old.Status != StatusInterrupted || old.Tenant != "" {
		t.Fatalf("old approval after the upgrade: %+v %v", old, err)
	}
	if _, err := th.GetFor(ctx, "apr_old", Approver{Name: "lead-a", Tenants: []string{"team-a"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a tenant-less approval shown to a scoped approver: %v", err)
	}
	ctx2, cancel := context.WithCancel(ctx)
	a := confirmAsync(ctx2, th.Hub, tenantRequest("team-a", "demo", "import os"))
	id := waitPending(t, th.Hub, 1)[0].ID
	err = db.WriteTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE approvals SET tenant = 'team-b' WHERE id = ?`, id)
		return err
	})
	if err == nil {
		t.Fatal("a pending approval's tenant could be rewritten")
	}
	cancel()
	a.wait(t)
}
