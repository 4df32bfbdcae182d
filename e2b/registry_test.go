package e2b

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/manager"
)

// fakeFleet says every session is another replica's and answers 299 for
// it, recording the keys it was asked to route.
type fakeFleet struct{ keys []string }

func (f *fakeFleet) Forwarded(*http.Request) (string, bool) { return "", false }

func (f *fakeFleet) Route(w http.ResponseWriter, _ *http.Request, key, _ string, _ bool) (bool, error) {
	f.keys = append(f.keys, key)
	w.WriteHeader(299)
	return true, nil
}

// TestSandboxCallsRouted: in a fleet, a sandbox call whose token checks
// out is routed by its session's key (the replica serving the session
// answers it); one without a valid token, or for an unknown sandbox, is
// refused here and never forwarded.
func TestSandboxCallsRouted(t *testing.T) {
	s := bare()
	f := &fakeFleet{}
	s.deps.Fleet = f
	sb := newSandbox("sbxrouted", "base", manager.Principal{Role: "agent", Name: "a", Tenant: "t"}, "", nil)
	if err := s.deps.Registry.register(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Routes(func(p string, h http.Handler, _ bool) { mux.Handle(p, h) })
	for _, tc := range []struct {
		name, method, path, id, token, traffic string
		status                                 int
		routed                                 bool
	}{
		{"envd call", "POST", "/e2b/process.Process/List", sb.id, sb.envdToken, "", 299, true},
		{"files", "GET", "/e2b/files?path=a", sb.id, sb.envdToken, "", 299, true},
		{"interpreter", "GET", "/e2b/contexts", sb.id, "", sb.trafficToken, 299, true},
		{"wrong token", "POST", "/e2b/process.Process/List", sb.id, sb.trafficToken, "", 401, false},
		{"no token", "GET", "/e2b/health", sb.id, "", "", 401, false},
		{"unknown sandbox", "POST", "/e2b/filesystem.Filesystem/Stat", "sbxother", sb.envdToken, "", 503, false},
	} {
		f.keys = nil
		r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("E2b-Sandbox-Id", tc.id)
		if tc.token != "" {
			r.Header.Set("X-Access-Token", tc.token)
		}
		if tc.traffic != "" {
			r.Header.Set("E2B-Traffic-Access-Token", tc.traffic)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Body.String(), tc.status)
		}
		if routed := len(f.keys) == 1 && f.keys[0] == "t~sbxrouted"; routed != tc.routed {
			t.Errorf("%s: routed %v (%v), want %v", tc.name, routed, f.keys, tc.routed)
		}
	}
}
