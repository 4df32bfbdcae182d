package manager_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/workspace"
)

func fileReq(p string) manager.FileRequest {
	return manager.FileRequest{RequestID: "req-f", Principal: manager.Principal{Role: "agent", Name: "ci-bot", Tenant: "t1"}, SessionID: "s1", Path: p}
}

// TestFileOperationsAreAudited: every file operation writes exactly one
// record with the execution records' shape, whatever its outcome.
func TestFileOperationsAreAudited(t *testing.T) {
	h := newHarness(t, hopts{})
	ctx := context.Background()
	type want struct {
		kind, path, outcome, code string
		status                    int
		bytes                     int64
	}
	steps := []struct {
		name string
		do   func() error
		want want
	}{
		{"write", func() error {
			_, err := h.m.WriteFile(ctx, fileReq("/workspace/dir/a.txt"), workspace.WriteOverwrite, strings.NewReader("hello world\n"))
			return err
		}, want{manager.KindFileWrite, "/workspace/dir/a.txt", "ok", "", 200, 12}},
		{"read", func() error {
			_, err := h.m.ReadFile(ctx, fileReq("dir/a.txt"), 0, 0)
			return err
		}, want{manager.KindFileRead, "/workspace/dir/a.txt", "ok", "", 200, int64(len("     1\thello world"))}},
		{"get", func() error {
			return h.m.GetFile(ctx, fileReq("dir/a.txt"), func(rf *workspace.RawFile) (int64, error) {
				return io.Copy(io.Discard, rf)
			})
		}, want{manager.KindFileGet, "/workspace/dir/a.txt", "ok", "", 200, 12}},
		{"edit", func() error {
			_, err := h.m.EditFile(ctx, fileReq("dir/a.txt"), "world", "there", false)
			return err
		}, want{manager.KindFileEdit, "/workspace/dir/a.txt", "ok", "", 200, 12}},
		{"edit without a match", func() error {
			_, err := h.m.EditFile(ctx, fileReq("dir/a.txt"), "world", "there", false)
			return err
		}, want{manager.KindFileEdit, "/workspace/dir/a.txt", "failed", "edit_no_match", 409, 0}},
		{"list", func() error {
			_, err := h.m.ListFiles(ctx, fileReq(""), 2)
			return err
		}, want{manager.KindFileList, "/workspace", "ok", "", 200, 0}},
		{"glob", func() error {
			_, err := h.m.GlobFiles(ctx, fileReq("/workspace"), "**/*.txt")
			return err
		}, want{manager.KindFileGlob, "/workspace", "ok", "", 200, 0}},
		{"grep", func() error {
			_, err := h.m.GrepFiles(ctx, fileReq("dir"), workspace.GrepQuery{Pattern: "sg-secret-needle", Literal: true})
			return err
		}, want{manager.KindFileGrep, "/workspace/dir", "ok", "", 200, 12}},
		{"traversal", func() error {
			_, err := h.m.ReadFile(ctx, fileReq("../../etc/passwd"), 0, 0)
			return err
		}, want{manager.KindFileRead, "", "denied", "path_traversal", 400, 0}},
		{"not found", func() error {
			_, err := h.m.ReadFile(ctx, fileReq("nope.txt"), 0, 0)
			return err
		}, want{manager.KindFileRead, "/workspace/nope.txt", "failed", "not_found", 404, 0}},
		{"too large", func() error {
			_, err := h.m.WriteFile(ctx, fileReq("big"), workspace.WriteOverwrite, io.LimitReader(zeros{}, workspace.DefaultMaxFileBytes+1))
			return err
		}, want{manager.KindFileWrite, "/workspace/big", "invalid", "file_too_large", 413, 0}}, // nothing written
		{"delete", func() error {
			_, err := h.m.DeleteFile(ctx, fileReq("dir/a.txt"), false)
			return err
		}, want{manager.KindFileDelete, "/workspace/dir/a.txt", "ok", "", 200, 12}},
	}
	for i, s := range steps {
		err := s.do()
		if (err == nil) != (s.want.code == "") {
			t.Fatalf("%s: err %v", s.name, err)
		}
		recs := h.audit.Records()
		if len(recs) != i+1 {
			t.Fatalf("%s: %d records after %d operations", s.name, len(recs), i+1)
		}
		r := newest(recs)
		got := want{r.Kind, r.Path, r.Outcome, r.ErrorCode, r.HTTPStatus, r.Bytes}
		if got != s.want {
			t.Errorf("%s: record %+v, want %+v", s.name, got, s.want)
		}
		if r.RequestID != "req-f" || r.SessionID != "s1" || r.Principal != "agent:ci-bot" || r.DurationMS < 0 {
			t.Errorf("%s: record identity %+v", s.name, r)
		}
	}
	all, _ := json.Marshal(h.audit.Records())
	if strings.Contains(string(all), "sg-secret-needle") || strings.Contains(string(all), "hello world") {
		t.Errorf("a record carries file content or a grep pattern: %s", all)
	}
	if !strings.Contains(string(all), `"requested_path":"\"../../etc/passwd\""`) {
		t.Errorf("the refused path is not recorded: %s", all)
	}
}

func TestFileOperationCancelled(t *testing.T) {
	h := newHarness(t, hopts{})
	if _, err := h.m.WriteFile(context.Background(), fileReq("x.txt"), workspace.WriteOverwrite, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := h.m.GrepFiles(ctx, fileReq(""), workspace.GrepQuery{Pattern: "x", Literal: true})
	if err == nil {
		t.Fatal("a cancelled grep succeeded")
	}
	if r := newest(h.audit.Records()); r.Outcome != "cancelled" || r.ErrorCode != "cancelled" {
		t.Fatalf("record %+v", r)
	}
}

func TestFileOperationInvalidSession(t *testing.T) {
	h := newHarness(t, hopts{})
	req := fileReq("x")
	req.SessionID = "../s1"
	_, err := h.m.ListFiles(context.Background(), req, 1)
	if err == nil {
		t.Fatal("an invalid session id was accepted")
	}
	if r := h.oneRecord(t); r.Outcome != "invalid" || r.ErrorCode != "invalid_request" || r.Kind != manager.KindFileList {
		t.Fatalf("record %+v", r)
	}
}

// newest is the record with the highest id.
func newest(recs []audit.Record) audit.Record {
	best := recs[0]
	for _, r := range recs {
		if r.ID > best.ID {
			best = r
		}
	}
	return best
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestFileOperationsMarkSessionActive: a successful file operation moves
// the session's LastActiveAt without counting a run; a failed one does
// not move it.
func TestFileOperationsMarkSessionActive(t *testing.T) {
	h := newHarness(t, hopts{})
	ctx := context.Background()
	if _, err := h.m.WriteFile(ctx, fileReq("a.txt"), workspace.WriteOverwrite, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	first, err := h.m.Session(ctx, agent, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if first.LastActiveAt.IsZero() || first.Runs != 0 {
		t.Fatalf("after a write: %+v, want activity and no run", first)
	}
	time.Sleep(10 * time.Millisecond)
	if _, err := h.m.ReadFile(ctx, fileReq("missing.txt"), 0, 0); err == nil {
		t.Fatal("reading a missing file succeeded")
	}
	if info, _ := h.m.Session(ctx, agent, "s1"); !info.LastActiveAt.Equal(first.LastActiveAt) {
		t.Errorf("a failed read moved LastActiveAt: %v -> %v", first.LastActiveAt, info.LastActiveAt)
	}
	if _, err := h.m.ReadFile(ctx, fileReq("a.txt"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if info, _ := h.m.Session(ctx, agent, "s1"); !info.LastActiveAt.After(first.LastActiveAt) || info.Runs != 0 {
		t.Errorf("after a read: %+v, want a later LastActiveAt than %v and no run", info, first.LastActiveAt)
	}
}
