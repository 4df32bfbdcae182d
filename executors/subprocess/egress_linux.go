package subprocess

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/unixsock"
)

// netBridge is the network namespace of one run granted network: only
// lo, up, with the gateway's own listener on 127.0.0.1:EgressPort in it.
// The gateway makes the namespace and the listener before the run
// starts (so the port is there from the program's first instruction),
// and the run's launch joins the namespace instead of making an empty
// one. The listener is a socket of the namespace, accepted from anywhere
// in the gateway; nothing else of the namespace reaches the host: a run
// connecting to any other address or port finds nothing.
//
// A gateway that is not root (IsolationUserNS) can neither make nor join
// a network namespace, so there the bridge is a socket instead: the
// listener is a Unix socket in a directory of the run's own, bound at
// executors.EgressDir into the run's root, and bubblewrap's network
// namespace (lo up, nothing else) gets the shared forwarder
// (executors.EgressForwarderStart: socat in the run's root) on
// 127.0.0.1:3128, started and waited for before the program (nprocScript).
type netBridge struct {
	ns   *os.File // IsolationNamespaces: the namespace, held open for launches to join
	dir  string   // IsolationUserNS: the socket's directory, bound at executors.EgressDir
	ln   net.Listener
	once sync.Once
}

// newBridge makes a launch's bridge for the executor's isolation. caDir
// is the directory of the run's CA bundle (grantNetwork), "" for none:
// a socket bridge's directory, which the run sees instead, gets the
// bundle too.
func (e *Executor) newBridge(caDir string) (*netBridge, error) {
	if e.isolation == IsolationNamespaces {
		return newNetBridge()
	}
	return e.newSocketBridge(caDir)
}

// newSocketBridge makes a socket bridge's directory (the gateway's own,
// 0700: in a user namespace the run's uid is the gateway's on the host)
// and its listener.
func (e *Executor) newSocketBridge(caDir string) (*netBridge, error) {
	parent := filepath.Join(e.runDir, "egress")
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return nil, fmt.Errorf("egress bridge: %w", err)
	}
	dir, err := os.MkdirTemp(parent, "run-")
	if err != nil {
		return nil, fmt.Errorf("egress bridge: %w", err)
	}
	b := &netBridge{dir: dir}
	if caDir != "" {
		if err := os.Link(filepath.Join(caDir, executors.EgressBundleName), filepath.Join(dir, executors.EgressBundleName)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("egress bridge: %w", err)
		}
	}
	if b.ln, err = unixsock.Listen(dir, executors.EgressSocketName); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("egress bridge: listen: %w", err)
	}
	return b, nil
}

// newNetBridge makes the namespace on a thread of its own: unshare(2)
// gives the thread a new network namespace, in which lo is brought up
// and the listener created (a socket belongs to the namespace of the
// thread that created it). The thread is never unlocked, so the runtime
// destroys it instead of running other goroutines in the namespace.
func newNetBridge() (*netBridge, error) {
	type result struct {
		b   *netBridge
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		b, err := bridgeHere()
		ch <- result{b, err}
	}()
	r := <-ch
	return r.b, r.err
}

func bridgeHere() (*netBridge, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("egress bridge: unshare: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return nil, fmt.Errorf("egress bridge: lo up: %w", err)
	}
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("egress bridge: %w", err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(executors.EgressPort))
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("egress bridge: listen: %w", err)
	}
	return &netBridge{ns: ns, ln: ln}, nil
}

// loopbackUp sets IFF_UP on lo in the calling thread's namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// serve hands the run's connections to eg until the returned stop, which
// also closes the bridge.
func (b *netBridge) serve(ctx context.Context, eg executors.Egress) (stop func()) {
	stopServe := executors.ServeEgress(ctx, b.ln, eg)
	return func() {
		stopServe()
		b.close()
	}
}

// close closes the listener and the namespace descriptor; the kernel
// frees the namespace once the run's processes are gone too.
func (b *netBridge) close() {
	b.once.Do(func() {
		_ = b.ln.Close()
		if b.ns != nil {
			_ = b.ns.Close()
		}
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
	})
}

// joinNetNS moves the calling thread into the bridge's namespace, for a
// launch forked from it (startInRoot). fd < 0 is a no-op.
func joinNetNS(fd int) error {
	if fd < 0 {
		return nil
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("egress bridge: setns: %w", err)
	}
	return nil
}

// fd is the namespace's descriptor, or -1 for no bridge.
func (b *netBridge) fd() int {
	if b == nil || b.ns == nil {
		return -1
	}
	return int(b.ns.Fd())
}

// egressEnv is a run's environment when it is granted network (see
// executors.EgressEnv): env plus the proxy variables, and the CA
// variables when ca is set.
func egressEnv(env []string, ca []byte) []string {
	return append(append([]string(nil), env...), executors.EgressEnv(ca != nil)...)
}

// egressDir returns the host directory that a run trusting ca sees as
// executors.EgressDir: one per CA (its hash names it) in the executor's
// run directory, holding the system bundle of the run's root plus ca,
// written once and read-only to runs.
func (e *Executor) egressDir(ca []byte) (string, error) {
	sum := sha256.Sum256(ca)
	dir := filepath.Join(e.runDir, "egress", hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, executors.EgressBundleName)); err == nil {
		return dir, nil
	}
	system, err := os.ReadFile(filepath.Join(e.sysRoot, executors.SystemCABundle))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("egress: system CA bundle: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("egress: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".ca-*")
	if err != nil {
		return "", fmt.Errorf("egress: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(executors.EgressBundle(system, ca))
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		return "", fmt.Errorf("egress: write CA bundle: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, executors.EgressBundleName)); err != nil {
		return "", fmt.Errorf("egress: %w", err)
	}
	return dir, nil
}

// grantNetwork prepares l for spec's network obligation: nothing without
// network; with it, the proxy variables, the CA bundle in the root when
// the Egress has a CA, and the Egress the launch's bridge will serve.
// The bridge itself is made by the path that starts the run (cold, warm
// or zygote), since a warm interpreter has its own.
func (e *Executor) grantNetwork(spec executors.Spec, l *launch) error {
	if err := executors.CheckEgress(executors.KindSubprocess, e.Capabilities(), spec); err != nil || !spec.Network {
		return err
	}
	ca := spec.Egress.CACertPEM()
	l.env = egressEnv(l.env, ca)
	l.egress, l.egressID = spec.Egress, "proxy"
	if ca == nil {
		return nil
	}
	dir, err := e.egressDir(ca)
	if err != nil {
		return fmt.Errorf("subprocess: %w", err)
	}
	if l.root != nil {
		root := *l.root
		root.egress = dir
		l.root = &root
	}
	l.egressID = "proxy+ca:" + filepath.Base(dir)
	return nil
}

// openBridge makes l's bridge when l is granted network and serves the
// run's connections on it until stop; without network it does nothing.
func (e *Executor) openBridge(ctx context.Context, l *launch) (stop func(), err error) {
	if l.egress == nil {
		return func() {}, nil
	}
	b, err := e.newBridge(l.caDir())
	if err != nil {
		return nil, fmt.Errorf("subprocess: %w", err)
	}
	l.bridge = b
	return b.serve(ctx, l.egress), nil
}

// caDir is the directory of l's CA bundle, "" when it has none.
func (l *launch) caDir() string {
	if l.root == nil {
		return ""
	}
	return l.root.egress
}
