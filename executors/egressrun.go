package executors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
)

// What a run granted network sees, the same in every executor (DESIGN.md
// §6: the code cannot tell backends apart by its environment). The
// executors share these definitions instead of each spelling them.
const (
	// EgressDir is the directory of the egress files inside a sandbox:
	// the CA bundle, and for the container backends the proxy's socket.
	EgressDir = "/run/sandgate/egress"
	// EgressBundleName is the combined CA bundle's name in EgressDir.
	EgressBundleName = "ca.pem"
	// EgressBundlePath is where a run finds the combined bundle.
	EgressBundlePath = EgressDir + "/" + EgressBundleName
	// SystemCABundle is the system trust store of the runtime root
	// (Debian's ca-certificates) and of the host's: what the combined
	// bundle starts with, so the gateway CA is trusted in addition to
	// the system roots, never instead of them.
	SystemCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// EgressProxyURL is the proxy every run granted network is told about.
var EgressProxyURL = "http://127.0.0.1:" + strconv.Itoa(EgressPort)

// egressNoProxy keeps loopback traffic off the proxy: a run's own
// servers (a test server on localhost, a notebook kernel) stay
// reachable directly, as without a grant.
const egressNoProxy = "localhost,127.0.0.1,::1"

// caVariables are the variables the common clients read a CA bundle
// from: OpenSSL and Python's ssl (SSL_CERT_FILE), requests, curl, Node
// (which adds NODE_EXTRA_CA_CERTS to its own roots), pip and git.
var caVariables = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
	"PIP_CERT", "GIT_SSL_CAINFO"}

// EgressEnv is what a run granted network adds to its environment: the
// proxy variables in both spellings (curl reads only the lower-case
// http_proxy; Go, Python and Node read either) and, when withCA (the
// Egress has a CA), the CA bundle variables pointing at EgressBundlePath.
// A run without a grant gets none of them.
func EgressEnv(withCA bool) []string {
	env := make([]string, 0, 8+len(caVariables))
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env = append(env, name+"="+EgressProxyURL)
	}
	for _, name := range []string{"http_proxy", "https_proxy", "all_proxy"} {
		env = append(env, name+"="+EgressProxyURL)
	}
	env = append(env, "NO_PROXY="+egressNoProxy, "no_proxy="+egressNoProxy)
	if withCA {
		for _, name := range caVariables {
			env = append(env, name+"="+EgressBundlePath)
		}
	}
	return env
}

// EgressBundle is the combined CA bundle a run trusts when its Egress has
// a CA: the sandbox's system bundle followed by the gateway CA. Replacing
// the system roots would break every host the proxy does not intercept
// (end-to-end TLS); adding to them keeps those working.
func EgressBundle(system, ca []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(system) + len(ca) + 2)
	b.Write(system)
	if len(system) > 0 && !bytes.HasSuffix(system, []byte("\n")) {
		b.WriteByte('\n')
	}
	b.Write(ca)
	if len(ca) > 0 && !bytes.HasSuffix(ca, []byte("\n")) {
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// CheckEgress is every backend's check of the network obligation before
// it runs anything: a Spec granting network needs the network_grant
// capability (caps, the backend's in its current mode) and an Egress to
// bridge to. Either missing is a *CapabilityError (ErrCapabilityMissing):
// the run is refused, never given the host's network or none instead.
func CheckEgress(kind Kind, caps Capabilities, spec Spec) error {
	if !spec.Network {
		return nil
	}
	if !caps.NetworkGrant {
		return &CapabilityError{Kind: kind, Missing: []string{CapNetworkGrant}, Isolation: caps.Isolation}
	}
	if spec.Egress == nil {
		return fmt.Errorf("%s: %w: the run is granted network but has no egress proxy", kind, ErrCapabilityMissing)
	}
	return nil
}

// ServeEgress accepts the run's connections on ln and hands each to
// eg.ServeConn, until stop is called. stop closes ln, ends the context
// the connections are served under (so open tunnels close with the run)
// and returns once every ServeConn has returned: nothing of the run's
// traffic outlives Execute. ctx is the run's.
func ServeEgress(ctx context.Context, ln net.Listener, eg Egress) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() && !errors.Is(err, net.ErrClosed) {
					continue
				}
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				eg.ServeConn(ctx, c)
			}()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = ln.Close()
			cancel()
			wg.Wait()
		})
	}
}

// EgressSocketName is the proxy's Unix socket in EgressDir, for the
// backends whose sandbox reaches the gateway through a bind-mounted
// socket and a forwarder inside (docker, gvisor, subprocess without
// root).
const EgressSocketName = "proxy.sock"

// EgressForwarderStart is POSIX shell text that starts the forwarder of
// those backends in the background: socat listening on
// 127.0.0.1:EgressPort, connecting each connection to the proxy's socket.
// A sandbox without socat fails (exit 125) with the reason: a run granted
// network never runs without its proxy. socat is one of the run's
// processes and forks one per connection.
//
// A shell loop starts socat again whenever it exits (a fork that fails
// at the run's process limit ends socat's listener, for one). The loop
// is one more process of the run's while it is granted network. The
// container runs where CI found nothing listening on 127.0.0.1:3128 were
// the docker boot script skipping EgressForwarderReady (it tested "$2"
// after replacing its arguments): the program started before socat had
// bound.
var EgressForwarderStart = `command -v socat >/dev/null 2>&1 || { echo "sandgate: no socat in the sandbox (the egress forwarder)" >&2; exit 125; }
( while :; do socat TCP-LISTEN:` + strconv.Itoa(EgressPort) + `,bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:` + EgressDir + "/" + EgressSocketName + `; sleep 0.1; done ) </dev/null >/dev/null 2>&1 &
`

// EgressForwarderReady is POSIX shell text that waits (at most ~10 s)
// until the forwarder listens, its socket in /proc/net/tcp (127.0.0.1,
// EgressPort, state LISTEN), so the program's first connection finds it.
var EgressForwarderReady = `i=0
until grep -q ' 0100007F:` + fmt.Sprintf("%04X", EgressPort) + ` 00000000:0000 0A ' /proc/net/tcp 2>/dev/null; do
i=$((i+1)); [ "$i" -gt 1000 ] && { echo "sandgate: the egress forwarder did not start" >&2; exit 125; }
sleep 0.01
done
`
