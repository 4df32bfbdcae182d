package manager_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

func sessionIDs(p manager.SessionPage) []string {
	ids := []string{}
	for _, s := range p.Sessions {
		ids = append(ids, s.ID)
	}
	return ids
}

func TestListSessions(t *testing.T) {
	h := newHarness(t, hopts{})
	for _, id := range []string{"e", "a", "c", "b", "d"} {
		if _, err := h.ws.Ensure(t.Context(), key(id)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name     string
		cursor   string
		limit    int
		want     []string
		wantNext string
	}{
		{name: "first page", limit: 2, want: []string{"a", "b"}, wantNext: "t1~b"},
		{name: "middle page", cursor: "b", limit: 2, want: []string{"c", "d"}, wantNext: "t1~d"},
		{name: "last page", cursor: "d", limit: 2, want: []string{"e"}},
		{name: "exact fit has no cursor", limit: 5, want: []string{"a", "b", "c", "d", "e"}},
		{name: "zero limit takes the default", want: []string{"a", "b", "c", "d", "e"}},
		{name: "negative limit takes the default", limit: -3, want: []string{"a", "b", "c", "d", "e"}},
		{name: "cursor between ids", cursor: "bb", limit: 1, want: []string{"c"}, wantNext: "t1~c"},
		{name: "cursor past the end", cursor: "z", limit: 2, want: []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			page, err := h.m.ListSessions(t.Context(), agent, manager.SessionQuery{Cursor: tc.cursor, Limit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			if got := sessionIDs(page); !reflect.DeepEqual(got, tc.want) || page.NextCursor != tc.wantNext {
				t.Errorf("page %v next %q, want %v next %q", got, page.NextCursor, tc.want, tc.wantNext)
			}
			if page.Sessions == nil {
				t.Errorf("Sessions is nil: JSON would show null, not []")
			}
		})
	}

	t.Run("following the cursor visits every session once", func(t *testing.T) {
		var all []string
		cursor := ""
		for range 10 {
			page, err := h.m.ListSessions(t.Context(), agent, manager.SessionQuery{Cursor: cursor, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, sessionIDs(page)...)
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		if strings.Join(all, ",") != "a,b,c,d,e" {
			t.Errorf("walked %v", all)
		}
	})

	t.Run("empty store", func(t *testing.T) {
		page, err := newHarness(t, hopts{}).m.ListSessions(t.Context(), agent, manager.SessionQuery{Cursor: "", Limit: 0})
		if err != nil {
			t.Fatal(err)
		}
		if got := toJSON(t, page); got != `{"sessions":[]}` {
			t.Errorf("empty page JSON %s", got)
		}
	})
}

// TestSessionActivity: runs show up in the session's counters, and a run
// in progress is counted as running.
func TestSessionActivity(t *testing.T) {
	h := newHarness(t, hopts{})
	var during manager.SessionInfo
	var duringErr error
	h.sub.ExecuteFunc = func(ctx context.Context, _ executors.Spec) (executors.Result, error) {
		during, duringErr = h.m.Session(ctx, agent, "s1")
		return executors.Result{}, nil
	}
	if _, err := h.m.Run(t.Context(), request("python", safePython)); err != nil {
		t.Fatal(err)
	}
	if duringErr != nil || during.Running != 1 || during.Runs != 0 {
		t.Errorf("during the run: %+v %v, want running 1", during, duringErr)
	}
	info, err := h.m.Session(t.Context(), agent, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "s1" || info.Runs != 1 || info.Running != 0 || info.LastExecutor != "subprocess" ||
		info.CreatedAt.IsZero() || info.LastActiveAt.IsZero() {
		t.Errorf("after the run: %+v", info)
	}
	page, err := h.m.ListSessions(t.Context(), agent, manager.SessionQuery{Cursor: "", Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Sessions) != 1 || !reflect.DeepEqual(page.Sessions[0], info) {
		t.Errorf("ListSessions %+v, want [%+v]", page.Sessions, info)
	}
	// A denied request does not count as a run.
	if _, err := h.m.Run(t.Context(), request("bash", criticalBash)); !errors.Is(err, manager.ErrPolicyDenied) {
		t.Fatalf("critical: %v", err)
	}
	if info, _ := h.m.Session(t.Context(), agent, "s1"); info.Runs != 1 {
		t.Errorf("runs %d after a denied request, want 1", info.Runs)
	}
}

func TestSessionLookup(t *testing.T) {
	h := newHarness(t, hopts{})
	if _, err := h.ws.Ensure(t.Context(), key("known")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		id         string
		wantErr    error
		wantCode   errcode.Code
		wantStatus int
	}{
		{id: "known"},
		{id: "unknown", wantErr: workspace.ErrNotFound, wantCode: errcode.NotFound, wantStatus: http.StatusNotFound},
		{id: "../known", wantErr: manager.ErrInvalidRequest, wantCode: errcode.InvalidRequest, wantStatus: http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			info, err := h.m.Session(t.Context(), agent, tc.id)
			if tc.wantErr == nil {
				if err != nil || info.ID != tc.id || info.CreatedAt.IsZero() {
					t.Errorf("Session: %+v %v", info, err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Session: %v, want %v", err, tc.wantErr)
			}
			if code, status, _ := errcode.Of(err); code != tc.wantCode || status != tc.wantStatus {
				t.Errorf("errcode.Of = %s/%d, want %s/%d", code, status, tc.wantCode, tc.wantStatus)
			}
		})
	}
}

func TestDeleteSession(t *testing.T) {
	releaseErr := errors.New("container stuck")
	cases := []struct {
		name         string
		id           string
		exists       bool
		purge        bool
		releaseErr   error
		wantErr      error
		wantReleased bool
		wantExists   bool
	}{
		{name: "keep the workspace", id: "s1", exists: true, wantReleased: true, wantExists: true},
		{name: "purge removes the workspace", id: "s1", exists: true, purge: true, wantReleased: true},
		{name: "unknown session", id: "nobody", wantReleased: true},
		{name: "unknown session purged", id: "nobody", purge: true, wantReleased: true},
		{name: "release error is reported", id: "s1", exists: true, releaseErr: releaseErr, wantErr: releaseErr, wantReleased: true, wantExists: true},
		{name: "invalid id", id: "../s1", purge: true, wantErr: manager.ErrInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rel := &releasingFake{Fake: &executortest.Fake{KindValue: executors.KindDocker}, err: tc.releaseErr}
			plain := &executortest.Fake{KindValue: executors.KindSubprocess}
			h := newHarness(t, hopts{execs: []executors.Executor{plain, rel}})
			if _, err := h.ws.Ensure(t.Context(), key("s1")); err != nil {
				t.Fatal(err)
			}
			if tc.exists {
				if _, err := h.m.Run(t.Context(), request("python", safePython)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 2 { // DELETE is idempotent
				err := h.m.DeleteSession(t.Context(), agent, tc.id, tc.purge)
				if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Errorf("DeleteSession #%d: %v, want %v", i+1, err, tc.wantErr)
				}
			}
			wantRel := []string(nil)
			if tc.wantReleased {
				wantRel = []string{key(tc.id), key(tc.id)}
			}
			if got := rel.Released(); !reflect.DeepEqual(got, wantRel) {
				t.Errorf("ReleaseSession calls %v, want %v", got, wantRel)
			}
			if tc.id != "s1" {
				if _, err := h.m.Session(t.Context(), agent, "s1"); err != nil {
					t.Errorf("deleting %q touched s1: %v", tc.id, err)
				}
				return
			}
			info, err := h.m.Session(t.Context(), agent, "s1")
			_, statErr := os.Stat(h.ws.Root() + "/" + key("s1"))
			if tc.wantExists {
				if err != nil || statErr != nil {
					t.Fatalf("workspace gone after delete without purge: %v %v", err, statErr)
				}
				if info.Runs != 0 || !info.LastActiveAt.IsZero() || info.LastExecutor != "" {
					t.Errorf("deleted session keeps its activity: %+v", info)
				}
			} else if !errors.Is(err, workspace.ErrNotFound) || !os.IsNotExist(statErr) {
				t.Errorf("after purge: Session %v, stat %v; want not found", err, statErr)
			}
		})
	}
}

// TestRunConcurrent: concurrent requests over a few sessions each leave one
// record and are all counted.
func TestRunConcurrent(t *testing.T) {
	h := newHarness(t, hopts{})
	const n = 24
	sessions := []string{"c0", "c1", "c2"}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := request("python", safePython)
			req.RequestID = "req-" + string(rune('A'+i))
			req.SessionID = sessions[i%len(sessions)]
			if _, err := h.m.Run(context.Background(), req); err != nil {
				t.Errorf("Run %s: %v", req.RequestID, err)
			}
		})
	}
	wg.Wait()
	recs := h.audit.Records()
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.RequestID] = true
	}
	if len(recs) != n || len(seen) != n {
		t.Errorf("%d records for %d distinct ids, want %d", len(recs), len(seen), n)
	}
	total := 0
	for _, id := range sessions {
		info, err := h.m.Session(t.Context(), agent, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Running != 0 {
			t.Errorf("session %s still running %d", id, info.Running)
		}
		total += info.Runs
	}
	if total != n || len(h.sub.Calls()) != n {
		t.Errorf("runs counted %d, executed %d, want %d", total, len(h.sub.Calls()), n)
	}
}
