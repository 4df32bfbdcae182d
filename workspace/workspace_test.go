package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateSessionID(t *testing.T) {
	cases := []struct {
		id string
		ok bool
	}{
		{"s1", true}, {"ci-build_42.x", true}, {strings.Repeat("a", 128), true},
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {"../x", false},
		{strings.Repeat("a", 129), false}, {"a b", false}, {"a\x00b", false}, {"é", false}, {`a\b`, false},
	}
	for _, c := range cases {
		err := ValidateSessionID(c.id)
		if (err == nil) != c.ok {
			t.Errorf("%q: err=%v, want ok=%v", c.id, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidSessionID) {
			t.Errorf("%q: %v does not wrap ErrInvalidSessionID", c.id, err)
		}
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	w, err := New(filepath.Join(t.TempDir(), "ws"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before Ensure: %v", err)
	}
	dir, err := w.Ensure(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if again, _ := w.Ensure(ctx, "a"); again != dir {
		t.Fatalf("Ensure is not stable: %s vs %s", again, dir)
	}
	if _, err := w.Ensure(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	list, err := w.List(ctx)
	if err != nil || len(list) != 2 || list[0].SessionID != "a" || list[1].SessionID != "b" {
		t.Fatalf("List: %v %+v", err, list)
	}
	for range 2 { // idempotent
		if err := w.Remove(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Remove: %v", err)
	}
	if _, err := w.Ensure(ctx, "../escape"); !errors.Is(err, ErrInvalidSessionID) {
		t.Fatalf("Ensure with a traversal id: %v", err)
	}
}
