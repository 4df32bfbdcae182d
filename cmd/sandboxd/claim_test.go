package main

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
)

// TestClaim: a sandboxd awaiting its key refuses everything until a
// claim sets one, takes the first claim only, and a sandboxd started
// with a key cannot be re-keyed.
func TestClaim(t *testing.T) {
	const keyA, keyB = "claim-key-a-0123456789", "claim-key-b-0123456789"
	awaiting := newTestServer(t, func(c *config) { c.APIKey, c.AwaitKey = "", true })
	keyed := newTestServer(t)
	steps := []struct {
		name         string
		ts           *testServer
		method, path string
		key          string
		want         int
	}{
		{"unclaimed refuses a run", awaiting, http.MethodPost, "/v1/bash/exec", keyA, http.StatusUnauthorized},
		{"unclaimed refuses no key", awaiting, http.MethodGet, "/v1/sandbox", "", http.StatusUnauthorized},
		{"a short key is no claim", awaiting, http.MethodPost, "/v1/claim", "short", http.StatusBadRequest},
		{"claim", awaiting, http.MethodPost, "/v1/claim", keyA, http.StatusOK},
		{"the claimed key serves", awaiting, http.MethodGet, "/v1/sandbox", keyA, http.StatusOK},
		{"another key is refused", awaiting, http.MethodGet, "/v1/sandbox", keyB, http.StatusUnauthorized},
		{"the same claim again", awaiting, http.MethodPost, "/v1/claim", keyA, http.StatusOK},
		{"a second claimant", awaiting, http.MethodPost, "/v1/claim", keyB, http.StatusConflict},
		{"still the first key", awaiting, http.MethodGet, "/v1/sandbox", keyA, http.StatusOK},
		{"a keyed sandboxd takes no claim", keyed, http.MethodPost, "/v1/claim", keyA, http.StatusUnauthorized},
		{"and keeps its key", keyed, http.MethodGet, "/v1/sandbox", testKey, http.StatusOK},
	}
	for _, s := range steps {
		hdr := []string{"X-Other", "x"}
		if s.key != "" {
			hdr = []string{"X-AIO-API-Key", s.key}
		}
		var body any
		if s.path == "/v1/bash/exec" {
			body = map[string]any{"command": "true"}
		}
		if r := s.ts.do(s.method, s.path, body, hdr...); r.status != s.want {
			t.Fatalf("%s: status %d, want %d: %s", s.name, r.status, s.want, r.raw)
		}
	}
}

// TestWorkspaceFingerprint: the hash of an empty workspace is the
// well-known one, and every kind of change a run can make changes it.
func TestWorkspaceFingerprint(t *testing.T) {
	ts := newTestServer(t)
	get := func() string {
		t.Helper()
		d := ts.do(http.MethodGet, "/v1/workspace/fingerprint", nil).envelope(t, true)
		return d["fingerprint"].(string)
	}
	if fp := get(); fp != aiowire.EmptyFingerprint {
		t.Fatalf("empty workspace: %s, want %s", fp, aiowire.EmptyFingerprint)
	}
	f := filepath.Join(ts.ws, "sub", "a.txt")
	changes := []struct {
		name string
		do   func() error
	}{
		{"a directory", func() error { return os.Mkdir(filepath.Join(ts.ws, "sub"), 0o755) }},
		{"a file", func() error { return os.WriteFile(f, []byte("one"), 0o644) }},
		{"its size", func() error { return os.WriteFile(f, []byte("three"), 0o644) }},
		{"its time", func() error { return os.Chtimes(f, time.Now(), time.Unix(1e9, 0)) }},
		{"its mode", func() error { return os.Chmod(f, 0o600) }},
		{"a symlink", func() error { return os.Symlink("a.txt", filepath.Join(ts.ws, "sub", "l")) }},
		{"its target", func() error {
			l := filepath.Join(ts.ws, "sub", "l")
			return errors.Join(os.Remove(l), os.Symlink("b.txt", l))
		}},
		{"a removal", func() error { return os.Remove(f) }},
	}
	last := get()
	if get() != last {
		t.Fatal("the fingerprint changed with nothing changed")
	}
	for _, c := range changes {
		if err := c.do(); err != nil {
			t.Fatal(c.name, err)
		}
		fp := get()
		if fp == last {
			t.Fatalf("%s: the fingerprint did not change", c.name)
		}
		last = fp
	}
}
