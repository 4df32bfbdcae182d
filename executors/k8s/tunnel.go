package k8s

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// tunnel is a port-forward from 127.0.0.1:<random> on the gateway's host
// to sandboxd on the pod's loopback, through the apiserver and the
// kubelet: the gateway needs no route to the pod network, and the pod
// needs no listener beyond its own loopback. Every request through it
// carries the sandbox's key, so another local user reaching the port
// gains nothing.
type tunnel struct {
	port     int
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

func (e *Executor) openTunnel(ctx context.Context, pod string) (*tunnel, error) {
	rt, upgrader, err := spdy.RoundTripperFor(e.rc)
	if err != nil {
		return nil, unavailable("port-forward transport", err)
	}
	u := e.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.cfg.Namespace).Name(pod).
		SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	t := &tunnel{stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(sandboxdPort)},
		t.stop, ready, io.Discard, io.Discard)
	if err != nil {
		return nil, unavailable("port-forward", err)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- fw.ForwardPorts()
		close(t.done)
	}()
	select {
	case <-ready:
	case err := <-errc:
		return nil, unavailable("port-forward to the sandbox pod", err)
	case <-ctx.Done():
		t.close()
		return nil, unavailable("port-forward to the sandbox pod", ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.close()
		return nil, unavailable("port-forward to the sandbox pod", fmt.Errorf("ports %v: %w", ports, err))
	}
	t.port = int(ports[0].Local)
	return t, nil
}

func (t *tunnel) url() string { return "http://127.0.0.1:" + strconv.Itoa(t.port) }

func (t *tunnel) dead() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

func (t *tunnel) close() { t.stopOnce.Do(func() { close(t.stop) }) }
