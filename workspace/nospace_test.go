package workspace

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/errcode"
)

// TestWriteOnAFullDisk: a write to a workspace whose filesystem is full
// (a 1 MiB tmpfs, so ENOSPC is the kernel's) is 507 insufficient_storage,
// not internal, and leaves nothing half written (issue 21's soak found
// 500 internal). Needs root for the mount.
func TestWriteOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("SANDGATE_REQUIRE_ROOT") == "1" {
			t.Fatal("SANDGATE_REQUIRE_ROOT=1 but not running as root")
		}
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0711"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	w, err := New(filepath.Join(dir, "ws"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := w.Write(ctx, sess, "small.txt", WriteOverwrite, bytes.NewReader([]byte("fits\n"))); err != nil {
		t.Fatalf("small write: %v", err)
	}
	_, err = w.Write(ctx, sess, "big.bin", WriteOverwrite, bytes.NewReader(make([]byte, 2<<20)))
	if code := codeOf(err); code != errcode.InsufficientStorage {
		t.Fatalf("write of 2 MiB on a 1 MiB filesystem: code %q (%v), want %q", code, err, errcode.InsufficientStorage)
	}
	if _, err := w.Write(ctx, sess, "after.txt", WriteOverwrite, bytes.NewReader([]byte("space again\n"))); err != nil {
		t.Fatalf("the failed write left the disk full: %v", err)
	}
	if rf, err := w.OpenRaw(ctx, sess, "big.bin"); err == nil {
		rf.Close()
		t.Error("big.bin exists after its write failed")
	}
}
