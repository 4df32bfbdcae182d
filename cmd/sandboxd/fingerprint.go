package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
)

// GET /v1/workspace/fingerprint hashes the workspace tree (each entry's
// path, type, size, modification time, mode and link target, in lexical
// order, symlinks not followed), so a gateway that keeps a copy of the
// workspace outside the sandbox (executors/k8s) learns whether a run
// changed it without copying it. It is a sandgate extension of the AIO
// API; a tree that cannot be read whole is an error, never a partial
// hash, so the caller copies rather than trusts a stale one.

type fingerprint = aiowire.Fingerprint

func (s *server) handleFingerprint(w http.ResponseWriter, r *http.Request) {
	fp, err := workspaceFingerprint(s.cfg.Workspace)
	if err != nil {
		s.cfg.Log.Warn("workspace fingerprint", "err", err)
		writeFail(w, http.StatusInternalServerError, "the workspace could not be read whole", nil)
		return
	}
	writeOK(w, fp)
}

func workspaceFingerprint(dir string) (fingerprint, error) {
	h := sha256.New()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		fmt.Fprintf(h, "%s\x00%v\x00%d\x00%d\x00%s\n", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), link)
		n++
		return nil
	})
	if err != nil {
		return fingerprint{}, err
	}
	return fingerprint{Fingerprint: hex.EncodeToString(h.Sum(nil)), Entries: n}, nil
}
