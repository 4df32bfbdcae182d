package confirm

import (
	"context"
	"errors"
	"testing"
)

func TestAutoApproveOnlyPermissive(t *testing.T) {
	for _, mode := range []string{"STRICT", "", "permissive", "YOLO"} {
		if _, err := NewAutoApprove(mode); !errors.Is(err, ErrNotPermissive) {
			t.Errorf("mode %q: err %v, want ErrNotPermissive", mode, err)
		}
	}
	a, err := NewAutoApprove("PERMISSIVE")
	if err != nil {
		t.Fatal(err)
	}
	o, err := a.Confirm(context.Background(), Request{RequestID: "r1"})
	if err != nil || !o.Approved() || o.DecidedBy != "auto-approve" {
		t.Fatalf("got %+v %v", o, err)
	}
}

func TestDigestBindsEveryField(t *testing.T) {
	base := Request{Tenant: "team-a", SessionID: "s", Language: "python", CodeSHA256: "abc", PolicyRevision: "r1", Executor: "docker",
		Context: map[string]bool{"needs_browser": false}}
	changes := map[string]func(*Request){
		"tenant":   func(r *Request) { r.Tenant = "team-b" },
		"session":  func(r *Request) { r.SessionID = "t" },
		"language": func(r *Request) { r.Language = "bash" },
		"code":     func(r *Request) { r.CodeSHA256 = "abd" },
		"revision": func(r *Request) { r.PolicyRevision = "r2" },
		"executor": func(r *Request) { r.Executor = "aio" },
		"context":  func(r *Request) { r.Context = map[string]bool{"needs_browser": true} },
	}
	for name, change := range changes {
		r := base
		change(&r)
		if r.Digest() == base.Digest() {
			t.Errorf("changing %s did not change the digest", name)
		}
	}
	same := base
	same.RequestID, same.Code = "other", "display only"
	if same.Digest() != base.Digest() {
		t.Error("fields outside the binding changed the digest")
	}
}
