package manager_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/workspace"
)

// aheadMemory is audit.Memory with write-ahead support, as SQLite and
// PostgreSQL have: Complete stores the final record (a second entry is
// enough for what the manager does with it).
type aheadMemory struct{ *audit.Memory }

func (s aheadMemory) Complete(ctx context.Context, rec *audit.Record) error {
	r := *rec
	r.ID = 0
	return s.Append(ctx, &r)
}

// TestFileOpsFailClosedWhenAuditFails: with the audit database's disk
// full (issue 21's soak found file operations answered 200 with no
// record), a file operation neither changes the workspace nor answers
// with content unless its record is written.
func TestFileOpsFailClosedWhenAuditFails(t *testing.T) {
	ctx := context.Background()
	mem := audit.NewMemory()
	h := newHarness(t, hopts{store: aheadMemory{mem}})
	if _, err := h.m.WriteFile(ctx, fileReq("keep.txt"), workspace.WriteOverwrite, strings.NewReader("kept\n")); err != nil {
		t.Fatal(err)
	}
	mem.AppendErr = errors.New("database or disk is full")
	steps := []struct {
		name string
		do   func() error
	}{
		{"write", func() error {
			_, err := h.m.WriteFile(ctx, fileReq("new.txt"), workspace.WriteOverwrite, strings.NewReader("x\n"))
			return err
		}},
		{"edit", func() error {
			_, err := h.m.EditFile(ctx, fileReq("keep.txt"), "kept", "changed", false)
			return err
		}},
		{"delete", func() error {
			_, err := h.m.DeleteFile(ctx, fileReq("keep.txt"), false)
			return err
		}},
		{"read", func() error {
			_, err := h.m.ReadFile(ctx, fileReq("keep.txt"), 0, 0)
			return err
		}},
		{"grep", func() error {
			_, err := h.m.GrepFiles(ctx, fileReq(""), workspace.GrepQuery{Pattern: "kept"})
			return err
		}},
	}
	for _, s := range steps {
		err := s.do()
		if code, _, _ := errcode.Of(err); err == nil || code != errcode.Internal {
			t.Errorf("%s with the audit write failing: err %v, want an internal error", s.name, err)
		}
	}
	mem.AppendErr = nil
	page, err := h.m.ReadFile(ctx, fileReq("keep.txt"), 0, 0)
	if err != nil {
		t.Fatalf("read after: %v", err)
	}
	if got := page.Content; !strings.Contains(got, "kept") {
		t.Errorf("keep.txt changed while its records could not be written: %q", got)
	}
	if _, err := h.m.ReadFile(ctx, fileReq("new.txt"), 0, 0); err == nil {
		t.Error("new.txt was written while its record could not be")
	}
}
