package executortest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/executors"
)

// The egress checks of DESIGN.md §9: a run granted network reaches the
// gateway's proxy at 127.0.0.1:EgressPort, with the proxy variables set,
// and through it nothing but what the proxy dials; the sandbox itself
// still has no interface but lo, so a raw socket to a host listener
// fails. A TestProxy stands in for the gateway's proxy: it routes two
// test host names to servers on the host's 127.0.0.1, one plain HTTP and
// one HTTPS whose certificate a test CA signed, and reports that CA as
// the gateway's.

// Test host names the TestProxy routes. They are not in NO_PROXY and
// resolve nowhere: a client reaches them only through the proxy.
const (
	egressPlainHost  = "plain.egress.test"
	egressSecureHost = "secure.egress.test"
)

// egressFixture is one test's proxy and servers.
type egressFixture struct {
	proxy     *TestProxy
	plain     *EgressTarget
	secure    *EgressTarget
	rawPort   int
	rawAccept func() int
	nonce     string
}

func newEgressFixture(t *testing.T, withCA bool) *egressFixture {
	f := &egressFixture{proxy: NewTestProxy(), nonce: "n" + Nonce()}
	f.plain = NewEgressTarget(t, nil)
	f.proxy.Route(egressPlainHost+":80", f.plain.Addr())
	if withCA {
		ca := NewTestCA(t)
		f.secure = NewEgressTarget(t, ca.ServerTLS(t, egressSecureHost))
		f.proxy.Route(egressSecureHost+":443", f.secure.Addr())
		f.proxy.SetCA(ca.CertPEM)
	}
	f.rawPort, f.rawAccept = LoopbackListener(t)
	return f
}

// progEgress: a raw connection to the host listener (%d), then the
// language's HTTP client through the proxy variables to the plain (%s,
// the path) and, where given, the secure server, then what the
// environment says. Each line is checked on its own.
var progEgress = program{
	"bash": `if timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>/dev/null; then echo raw connected; else echo raw refused; fi
curl -sS --max-time 20 http://` + egressPlainHost + `/%[2]s || { echo plain failed
  echo "diag lo $(cat /sys/class/net/lo/operstate 2>&1) listen $(grep -c ' 0100007F:0C38 00000000:0000 0A ' /proc/net/tcp)"
  for p in /proc/[0-9]*; do printf '%%s:%%s ' "${p#/proc/}" "$(cat $p/comm 2>/dev/null)"; done; echo; }
if [ -n "$SSL_CERT_FILE" ]; then
  curl -sS --max-time 20 https://` + egressSecureHost + `/%[2]s || echo secure failed
  echo "bundle $(grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE") system $(cat ` + executors.SystemCABundle + ` 2>/dev/null | grep -c 'BEGIN CERTIFICATE')"
fi
echo "env $HTTP_PROXY $https_proxy $NO_PROXY ${SSL_CERT_FILE:-no-ca}"
`,
	"python": `import os, socket, urllib.request
try:
    socket.create_connection(("127.0.0.1", %d), timeout=3).close()
    print("raw connected")
except OSError:
    print("raw refused")
urls = ["http://` + egressPlainHost + `/%[2]s"]
if os.environ.get("SSL_CERT_FILE"):
    urls.append("https://` + egressSecureHost + `/%[2]s")
for u in urls:
    try:
        print(urllib.request.urlopen(u, timeout=20).read().decode().strip())
    except Exception as e:
        print("failed", u, e)
print("env", os.environ.get("HTTP_PROXY"), os.environ.get("https_proxy"), os.environ.get("NO_PROXY"), os.environ.get("SSL_CERT_FILE", "no-ca"))
`,
	// Node's http module ignores the proxy variables; the program speaks
	// the proxy protocol itself, as a proxy-aware Node client does.
	"javascript": `const net = require('net'), http = require('http');
const raw = () => new Promise(done => {
  const s = net.connect(%d, '127.0.0.1');
  s.setTimeout(3000, () => { s.destroy(); done('raw refused'); });
  s.on('connect', () => { s.destroy(); done('raw connected'); });
  s.on('error', () => done('raw refused'));
});
const viaProxy = () => new Promise(done => {
  const u = new URL(process.env.HTTP_PROXY);
  http.get({ host: u.hostname, port: u.port, path: 'http://` + egressPlainHost + `/%[2]s', headers: { host: '` + egressPlainHost + `' } }, res => {
    let b = ''; res.on('data', d => b += d); res.on('end', () => done(b.trim()));
  }).on('error', e => done('plain failed ' + e.message));
});
(async () => {
  console.log(await raw());
  console.log(await viaProxy());
  console.log('env', process.env.HTTP_PROXY, process.env.https_proxy, process.env.NO_PROXY, process.env.NODE_EXTRA_CA_CERTS || 'no-ca');
})();
`,
}

// testEgressFailClosed: network without an Egress is refused before
// anything runs, whatever the backend's capabilities.
func (s *suite) testEgressFailClosed(t *testing.T) {
	r := s.newRun(t, executors.LangBash, "echo ran")
	r.spec.Network = true
	res, err := r.exec.Execute(t.Context(), r.spec)
	if !errors.Is(err, executors.ErrCapabilityMissing) {
		t.Fatalf("network without an egress proxy: result %+v err %v, want ErrCapabilityMissing", res, err)
	}
}

// testEgress runs progEgress granted network, with and without a CA.
func (s *suite) testEgress(t *testing.T, lang string) {
	for _, withCA := range []bool{true, false} {
		if !withCA && lang != executors.LangBash {
			continue // the CA-less environment is the same code path in every language
		}
		t.Run(map[bool]string{true: "ca", false: "no-ca"}[withCA], func(t *testing.T) {
			f := newEgressFixture(t, withCA)
			r := s.newRun(t, lang, progEgress.get(t, lang, f.rawPort, f.nonce))
			r.spec.Network, r.spec.Egress = true, f.proxy
			if !r.exec.Capabilities().NetworkGrant {
				_, err := r.exec.Execute(t.Context(), r.spec)
				if !errors.Is(err, executors.ErrCapabilityMissing) {
					t.Fatalf("a backend without network_grant ran a network run: %v", err)
				}
				t.Skipf("no network_grant in %s mode: refused, as it must be", r.exec.Capabilities().Isolation)
			}
			res := r.do(t.Context())
			f.proxy.Wait()
			f.check(t, lang, withCA, res)
		})
	}
}

func (f *egressFixture) check(t *testing.T, lang string, withCA bool, res executors.Result) {
	t.Helper()
	out := res.Stdout
	ca := "no-ca"
	if withCA {
		ca = executors.EgressBundlePath
	}
	want := []string{"raw refused", "egress-ok /" + f.nonce,
		fmt.Sprintf("env %s %s localhost,127.0.0.1,::1 %s\n", executors.EgressProxyURL, executors.EgressProxyURL, ca)}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\nstdout %q\nstderr %q\nproxy saw %q", w, out, res.Stderr, f.proxy.Seen())
		}
	}
	if !f.plain.Asked(f.nonce) {
		t.Errorf("the plain server was not reached through the proxy (proxy saw %q)", f.proxy.Seen())
	}
	if withCA && lang != executors.LangJavaScript {
		f.checkSecure(t, lang, out)
	}
	time.Sleep(50 * time.Millisecond)
	if n := f.rawAccept(); n > 0 {
		t.Errorf("the host listener accepted %d connections from the code", n)
	}
}

// checkSecure: the HTTPS server, whose certificate only the test CA
// signed, was trusted through the CONNECT tunnel; for bash, the bundle is
// the system bundle plus exactly the CA.
func (f *egressFixture) checkSecure(t *testing.T, lang, out string) {
	t.Helper()
	if !f.secure.Asked(f.nonce) || strings.Count(out, "egress-ok /"+f.nonce) != 2 {
		t.Errorf("the HTTPS server was not reached through a trusted tunnel:\n%s\nproxy saw %q", out, f.proxy.Seen())
	}
	if lang != executors.LangBash {
		return
	}
	var bundle, system int
	for _, line := range strings.Split(out, "\n") {
		if _, err := fmt.Sscanf(line, "bundle %d system %d", &bundle, &system); err == nil {
			break
		}
	}
	if bundle != system+1 {
		t.Errorf("the bundle has %d certificates and the system bundle %d: want the system roots plus the gateway CA", bundle, system)
	}
}
