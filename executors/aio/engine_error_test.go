package aio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// TestEngineErrorIsUnavailable: whatever the engine answers to a create or
// start (here what an engine shutting down said during issue 21's soak),
// the run gets executor_unavailable, not internal; a cancelled call keeps
// its context error.
func TestEngineErrorIsUnavailable(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool // executors.ErrUnavailable: the manager's 503 executor_unavailable
	}{
		{"engine stopping", errors.New("Error response from daemon: failed to update store for object type *libnetwork.endpoint: open : no such file or directory"), true},
		{"runtime failure", errors.New("Error response from daemon: OCI runtime create failed"), true},
		{"cancelled", fmt.Errorf("post: %w", context.Canceled), false},
		{"deadline", fmt.Errorf("post: %w", context.DeadlineExceeded), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := engineError("start container", c.err)
			if got := errors.Is(err, executors.ErrUnavailable); got != c.want {
				t.Errorf("unavailable %v, want %v (%v)", got, c.want, err)
			}
			if !errors.Is(err, c.err) {
				t.Error("the engine's error is not wrapped")
			}
		})
	}
}

// TestCreateCancelledLeavesNothing: a create whose client gave up (its
// context ended: a pool closing under an acquisition) while the engine went
// on and made the container leaves no container. A proxy in front of the
// engine passes the create on and withholds the engine's answer until the
// client has gone; only the name then finds the container.
func TestCreateCancelledLeavesNothing(t *testing.T) {
	e := newTestExecutor(t)
	sock := filepath.Join(newStateDir(t), "engine.sock")
	withholdCreates(t, sock)
	cfg := e.cfg
	cfg.Host = "unix://" + sock
	b, err := newLocalBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if h, err := b.create(ctx, newSlot(), ""); err == nil || h != nil {
		t.Fatalf("create through a proxy that withholds the answer: %v, %v", h, err)
	}
	if n := countContainers(t, e.cfg.Instance); n != 0 {
		t.Errorf("the cancelled create left %d containers", n)
	}
}

// withholdCreates serves the Docker API on sock, passing every request to
// the engine; a container create's answer is withheld until the client
// has gone.
func withholdCreates(t *testing.T, sock string) {
	engine := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", "/var/run/docker.sock")
	}}}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, "http://docker"+r.URL.RequestURI(), r.Body)
		out.Header = r.Header.Clone()
		res, err := engine.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		if strings.HasSuffix(r.URL.Path, "/containers/create") {
			<-r.Context().Done()
			return
		}
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}
