package manager_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

var (
	teamA = manager.Principal{Role: "agent", Name: "bot-a", Tenant: "team-a"}
	teamB = manager.Principal{Role: "agent", Name: "bot-b", Tenant: "team-b"}
	admin = manager.Principal{Role: "admin", Name: "root", Tenant: "root"}
)

func TestResolveSession(t *testing.T) {
	h := newHarness(t, hopts{})
	cases := []struct {
		name    string
		p       manager.Principal
		id      string
		wantKey string
		wantErr error
	}{
		{"a name is in the caller's tenant", teamA, "demo", "team-a~demo", nil},
		{"the same name is another session for another tenant", teamB, "demo", "team-b~demo", nil},
		{"one's own qualified id", teamA, "team-a~demo", "team-a~demo", nil},
		{"another tenant's qualified id is not found", teamB, "team-a~demo", "", workspace.ErrNotFound},
		{"an admin reaches any tenant", admin, "team-a~demo", "team-a~demo", nil},
		{"an admin's bare name is its own tenant's", admin, "demo", "root~demo", nil},
		{"invalid id", teamA, "../demo", "", manager.ErrInvalidRequest},
		{"invalid tenant part", teamA, "team a~demo", "", manager.ErrInvalidRequest},
		{"a caller without a tenant gets nothing", manager.Principal{Role: "agent", Name: "x"}, "demo", "", errors.New("internal")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref, err := h.m.ResolveSession(tc.p, tc.id)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("ResolveSession: %v", err)
			case tc.wantErr == nil:
				if ref.Key != tc.wantKey || ref.Key != workspace.Key(ref.Tenant, ref.ID) {
					t.Errorf("ref %+v, want key %s", ref, tc.wantKey)
				}
			case tc.wantErr.Error() == "internal":
				if code, _, _ := errcode.Of(err); code != errcode.Internal {
					t.Errorf("err %v (%s), want internal", err, code)
				}
			case !errors.Is(err, tc.wantErr):
				t.Errorf("err %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// TestTenantsRunApart: the same session name under two tenants reaches
// the executor as two sessions, with two workspaces; another tenant's
// qualified id runs nothing, and the refusal is recorded.
func TestTenantsRunApart(t *testing.T) {
	h := newHarness(t, hopts{})
	for _, p := range []manager.Principal{teamA, teamB} {
		req := request("python", safePython)
		req.Principal, req.SessionID = p, "demo"
		if _, err := h.m.Run(t.Context(), req); err != nil {
			t.Fatalf("%s: %v", p.Tenant, err)
		}
	}
	calls := h.sub.Calls()
	if len(calls) != 2 || calls[0].SessionID != "team-a~demo" || calls[1].SessionID != "team-b~demo" ||
		calls[0].WorkspaceDir == calls[1].WorkspaceDir {
		t.Fatalf("executor saw %d runs: %+v", len(calls), calls)
	}
	req := request("python", safePython)
	req.Principal, req.SessionID, req.RequestID = teamB, "team-a~demo", "req-probe"
	_, err := h.m.Run(t.Context(), req)
	if code, status, msg := errcode.Of(err); code != errcode.NotFound || status != 404 || msg != "session not found" {
		t.Fatalf("B on A's session: %v (%s/%d %q)", err, code, status, msg)
	}
	if n := len(h.sub.Calls()); n != 2 {
		t.Fatalf("%d runs after the refusal, want 2", n)
	}
	recs := h.audit.Records()
	if len(recs) != 3 || recs[0].Tenant != "team-a" || recs[1].Tenant != "team-b" || recs[0].SessionID != "demo" || recs[1].SessionID != "demo" {
		t.Fatalf("records %+v", recs)
	}
	last := recs[2]
	if last.RequestID != "req-probe" || last.ErrorCode != string(errcode.NotFound) || last.Principal != "agent:bot-b" ||
		last.Tenant != "team-b" || last.SessionID != "team-a~demo" {
		t.Errorf("refusal record %+v: want it under the caller's tenant, with the id it sent", last)
	}
}

// TestTenantsListAndFiles: a tenant lists and reads only its own sessions;
// an admin lists everyone's and narrows by tenant.
func TestTenantsListAndFiles(t *testing.T) {
	h := newHarness(t, hopts{})
	ctx := t.Context()
	for _, k := range []string{"team-a~a1", "team-a~demo", "team-b~demo", "team-b~b1"} {
		if _, err := h.ws.Ensure(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.m.WriteFile(ctx, manager.FileRequest{Principal: teamA, SessionID: "demo", Path: "secret.txt"},
		workspace.WriteOverwrite, strings.NewReader("a-secret")); err != nil {
		t.Fatal(err)
	}
	list := func(p manager.Principal, tenant string) (string, error) {
		page, err := h.m.ListSessions(ctx, p, manager.SessionQuery{Tenant: tenant})
		var ids []string
		for _, s := range page.Sessions {
			ids = append(ids, s.QualifiedID)
		}
		return strings.Join(ids, ","), err
	}
	for _, c := range []struct {
		p      manager.Principal
		tenant string
		want   string
	}{
		{teamA, "", "team-a~a1,team-a~demo"},
		{teamB, "", "team-b~b1,team-b~demo"},
		{teamB, "team-b", "team-b~b1,team-b~demo"},
		{admin, "", "team-a~a1,team-a~demo,team-b~b1,team-b~demo"},
		{admin, "team-b", "team-b~b1,team-b~demo"},
	} {
		if got, err := list(c.p, c.tenant); err != nil || got != c.want {
			t.Errorf("%s lists %q (tenant %q): %v, want %q", c.p.Tenant, got, c.tenant, err, c.want)
		}
	}
	if _, err := list(teamB, "team-a"); !errors.Is(err, manager.ErrNotFound) {
		t.Errorf("B listing A's tenant: %v, want not found", err)
	}
	for _, id := range []string{"team-a~demo", "demo"} {
		_, err := h.m.ReadFile(ctx, manager.FileRequest{Principal: teamB, SessionID: id, Path: "secret.txt"}, 0, 0)
		if code, _, _ := errcode.Of(err); code != errcode.NotFound {
			t.Errorf("B reading %s/secret.txt: %v, want not_found", id, err)
		}
	}
	if _, err := h.m.Session(ctx, teamB, "team-a~a1"); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("B describing A's session: %v", err)
	}
	if err := h.m.DeleteSession(ctx, teamB, "team-a~demo", true); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("B deleting A's session: %v", err)
	}
	page, err := h.m.ReadFile(ctx, manager.FileRequest{Principal: teamA, SessionID: "demo", Path: "secret.txt"}, 0, 0)
	if err != nil || !strings.Contains(page.Content, "a-secret") {
		t.Fatalf("A's file after B's attempts: %+v %v", page, err)
	}
	info, err := h.m.Session(ctx, admin, "team-a~demo")
	if err != nil || info.ID != "demo" || info.Tenant != "team-a" || info.QualifiedID != "team-a~demo" {
		t.Errorf("admin describing A's session: %+v %v", info, err)
	}
}

// TestQuotaCheckedBeforeAnythingRuns: a run refused by its tenant's quota
// is neither assessed against the policy, nor put to an approver, nor
// executed; it is recorded as limited. Another tenant is not held up.
func TestQuotaCheckedBeforeAnythingRuns(t *testing.T) {
	h := newHarness(t, hopts{cfg: manager.Config{Quotas: manager.QuotaConfig{
		Tenants: map[string]manager.Quota{"team-a": {MaxConcurrentRuns: 1}}}}})
	started, unblock := make(chan struct{}), make(chan struct{})
	h.sub.ExecuteFunc = func(ctx context.Context, s executors.Spec) (executors.Result, error) {
		if s.SessionID == "team-a~slow" {
			close(started)
			<-unblock
		}
		return executors.Result{}, nil
	}
	slow := request("python", safePython)
	slow.Principal, slow.SessionID = teamA, "slow"
	done := make(chan error, 1)
	go func() { _, err := h.m.Run(context.Background(), slow); done <- err }()
	<-started
	inputs := len(h.decider.Inputs())
	second := request("python", safePython)
	second.Principal, second.SessionID, second.RequestID = teamA, "other", "req-2"
	_, err := h.m.Run(t.Context(), second)
	if !errors.Is(err, manager.ErrConcurrencyQuota) {
		t.Fatalf("second run: %v", err)
	}
	if code, status, _ := errcode.Of(err); code != errcode.QuotaExceeded || status != 429 {
		t.Fatalf("code %s/%d", code, status)
	}
	if len(h.decider.Inputs()) != inputs || len(h.sub.Calls()) != 1 || h.ws.Exists("team-a~other") {
		t.Fatalf("the refused run got to the policy (%d inputs), an executor (%d calls) or a workspace", len(h.decider.Inputs()), len(h.sub.Calls()))
	}
	b := request("python", safePython)
	b.Principal = teamB
	if _, err := h.m.Run(t.Context(), b); err != nil {
		t.Fatalf("team-b while team-a is at its limit: %v", err)
	}
	close(unblock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var rec audit.Record
	for _, r := range h.audit.Records() {
		if r.RequestID == "req-2" {
			rec = r
		}
	}
	if rec.Outcome != manager.OutcomeLimited || rec.ErrorCode != "quota_exceeded" || rec.Detail["quota"] != "concurrent_runs" ||
		rec.Tenant != "team-a" || rec.SessionID != "other" {
		t.Fatalf("refusal record %+v", rec)
	}
	if _, err := h.m.Run(t.Context(), second); err != nil {
		t.Fatalf("after the slow run ended: %v", err)
	}
}

// TestUntenantedWorkspace: a workspace from before tenants belongs to no
// tenant; an admin lists it as "~name" and reaches and purges it by that
// id, nobody else reaches it.
func TestUntenantedWorkspace(t *testing.T) {
	h := newHarness(t, hopts{})
	if _, err := h.ws.Ensure(t.Context(), "legacy"); err != nil {
		t.Fatal(err)
	}
	page, err := h.m.ListSessions(t.Context(), admin, manager.SessionQuery{})
	if err != nil || len(page.Sessions) != 1 || page.Sessions[0].QualifiedID != "~legacy" || page.Sessions[0].Tenant != "" {
		t.Fatalf("admin lists %+v %v", page, err)
	}
	if _, err := h.m.Session(t.Context(), teamA, "~legacy"); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("an agent reaching a tenant-less workspace: %v", err)
	}
	if info, err := h.m.Session(t.Context(), admin, "~legacy"); err != nil || info.ID != "legacy" {
		t.Fatalf("admin: %+v %v", info, err)
	}
	if err := h.m.DeleteSession(t.Context(), admin, "~legacy", true); err != nil || h.ws.Exists("legacy") {
		t.Fatalf("admin purge: %v, exists %v", err, h.ws.Exists("legacy"))
	}
}
