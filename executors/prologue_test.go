package executors

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPrologueResolve(t *testing.T) {
	p := Prologue{Kind: KindDocker, UID: 61000, GID: 61001, Timeout: 30 * time.Second,
		Limits: Limits{MemoryMB: 512, CPUSeconds: 60, MaxProcs: 128, MaxOpenFiles: 256, MaxFileSizeMB: 100, MaxOutputBytes: 1 << 20, MaxSpillBytes: 16 << 20}}
	ok := Spec{RequestID: "req-1", Language: LangPython, WorkspaceDir: "/data/ws/s1"}
	with := func(f func(*Spec)) Spec { s := ok; f(&s); return s }
	for _, tc := range []struct {
		name  string
		spec  Spec
		err   error
		check func(Spec) bool
	}{
		{"defaults applied", ok, nil, func(s Spec) bool {
			return s.RequestID == "req-1" && s.UID == 61000 && s.GID == 61001 && s.Timeout == 30*time.Second && s.Limits == p.Limits
		}},
		{"the spec's own values win", with(func(s *Spec) {
			s.UID, s.GID, s.Timeout, s.Limits = 70001, 70001, time.Second, Limits{MemoryMB: 64}
		}), nil, func(s Spec) bool {
			return s.UID == 70001 && s.Timeout == time.Second && s.Limits.MemoryMB == 64 && s.Limits.MaxProcs == 128
		}},
		{"a random id when none", with(func(s *Spec) { s.RequestID = "" }), nil, func(s Spec) bool {
			return strings.HasPrefix(s.RequestID, "run-") && requestIDPattern.MatchString(s.RequestID)
		}},
		{"workspace cleaned", with(func(s *Spec) { s.WorkspaceDir = "/data//ws/s1/" }), nil, func(s Spec) bool {
			return s.WorkspaceDir == "/data/ws/s1"
		}},
		{"every language", with(func(s *Spec) { s.Language = LangJavaScript }), nil, nil},
		{"unknown language", with(func(s *Spec) { s.Language = "cobol" }), ErrUnsupportedLanguage, nil},
		{"empty language", with(func(s *Spec) { s.Language = "" }), ErrUnsupportedLanguage, nil},
		{"id with a slash", with(func(s *Spec) { s.RequestID = "../x" }), ErrInvalidRequestID, nil},
		{"id dot dot", with(func(s *Spec) { s.RequestID = ".." }), ErrInvalidRequestID, nil},
		{"id with a space", with(func(s *Spec) { s.RequestID = "a b" }), ErrInvalidRequestID, nil},
		{"id with a NUL", with(func(s *Spec) { s.RequestID = "a\x00b" }), ErrInvalidRequestID, nil},
		{"id too long", with(func(s *Spec) { s.RequestID = strings.Repeat("x", 129) }), ErrInvalidRequestID, nil},
		{"uid 0 with a gid", with(func(s *Spec) { s.GID = 5 }), ErrRootIdentity, nil},
		{"gid 0 with a uid", with(func(s *Spec) { s.UID = 5 }), ErrRootIdentity, nil},
		{"negative uid", with(func(s *Spec) { s.UID, s.GID = -1, -1 }), ErrRootIdentity, nil},
		{"relative workspace", with(func(s *Spec) { s.WorkspaceDir = "ws" }), ErrInvalidWorkspace, nil},
		{"no workspace", with(func(s *Spec) { s.WorkspaceDir = "" }), ErrInvalidWorkspace, nil},
		{"negative timeout", with(func(s *Spec) { s.Timeout = -time.Second }), ErrInvalidTimeout, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Resolve(tc.spec)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "docker: ") {
				t.Errorf("err %q does not name the backend", err)
			}
			if tc.check != nil && !tc.check(got) {
				t.Errorf("resolved %+v", got)
			}
		})
	}
	// A backend configured without an identity or a timeout refuses too.
	if _, err := (Prologue{Kind: KindAIO, Timeout: time.Second}).Resolve(ok); !errors.Is(err, ErrRootIdentity) {
		t.Errorf("no default identity: %v", err)
	}
	if _, err := (Prologue{Kind: KindAIO, UID: 1, GID: 1}).Resolve(ok); !errors.Is(err, ErrInvalidTimeout) {
		t.Errorf("no timeout: %v", err)
	}
}
