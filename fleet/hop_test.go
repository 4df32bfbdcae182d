package fleet

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHop: the owner takes a hop only as it was signed: for that method,
// URI and credential, under the fleet's key, within its age.
func TestHop(t *testing.T) {
	key, other := []byte("fleet-key-0123456789abcdef012345"), []byte("another-fleet-key-0123456789abcd")
	now := time.Now()
	tests := []struct {
		name string
		key  []byte
		at   time.Time
		ok   bool
	}{
		{name: "as signed", key: key, at: now, ok: true},
		{name: "another fleet's key", key: other, at: now},
		{name: "too old", key: key, at: now.Add(-hopMaxAge - time.Second)},
		{name: "from the future", key: key, at: now.Add(hopMaxAge + time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := httptest.NewRequest("POST", "http://owner:8080/v1/sessions/s/run_code?x=1", nil)
			out.Header.Set("Authorization", "Bearer agent")
			signHop(tc.key, out, "b", "req_1", tc.at)
			in := httptest.NewRequest("POST", "/v1/sessions/s/run_code?x=1", nil)
			in.Header = out.Header.Clone()
			hop, ok := verifyHop(key, in, now)
			if ok != tc.ok || (ok && (hop.From != "b" || hop.RequestID != "req_1")) {
				t.Fatalf("verify: %+v %v, want ok=%v", hop, ok, tc.ok)
			}
		})
	}
	// A valid hop moved to another request is refused.
	out := httptest.NewRequest("POST", "http://owner:8080/v1/sessions/s/run_code", nil)
	out.Header.Set("Authorization", "Bearer agent")
	signHop(key, out, "b", "req_1", now)
	moved := []struct {
		name, method, uri, auth, hop string
	}{
		{"another path", "POST", "/v1/sessions/t/run_code", "Bearer agent", out.Header.Get(HopHeader)},
		{"another method", "DELETE", "/v1/sessions/s/run_code", "Bearer agent", out.Header.Get(HopHeader)},
		{"another credential", "POST", "/v1/sessions/s/run_code", "Bearer admin", out.Header.Get(HopHeader)},
		{"another request id", "POST", "/v1/sessions/s/run_code", "Bearer agent", replaceField(out.Header.Get(HopHeader), 2, "req_2")},
		{"another forwarder", "POST", "/v1/sessions/s/run_code", "Bearer agent", replaceField(out.Header.Get(HopHeader), 0, "c")},
		{"garbage", "POST", "/v1/sessions/s/run_code", "Bearer agent", "b;1;2"},
	}
	for _, tc := range moved {
		in := httptest.NewRequest(tc.method, tc.uri, nil)
		in.Header.Set("Authorization", tc.auth)
		in.Header.Set(HopHeader, tc.hop)
		if _, ok := verifyHop(key, in, now); ok {
			t.Errorf("%s: hop accepted", tc.name)
		}
	}
}

func replaceField(h string, i int, v string) string {
	parts := strings.Split(h, ";")
	parts[i] = v
	return strings.Join(parts, ";")
}
