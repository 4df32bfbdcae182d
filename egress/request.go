package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// Schemes of a connection as the policy sees them.
const (
	schemeHTTPS = "https" // a CONNECT tunnel
	schemeHTTP  = "http"  // a plain absolute-form request
)

// errBadRequest is a proxy request the proxy cannot serve; the client gets
// 400 with its message.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, a ...any) error { return &badRequest{msg: fmt.Sprintf(format, a...)} }

// target is what one proxy request asks for.
type target struct {
	host   string // lower case, no brackets for IPv6
	port   int
	scheme string
}

func (t target) String() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// readProxyRequest reads one proxy request and the target it names. The
// raw Host header is read from the head before net/http parses it (and
// drops it), so a plain request whose Host differs from its URL is
// refused rather than forwarded to one server in the name of another.
func readProxyRequest(br *bufio.Reader) (*http.Request, target, error) {
	head, err := peekHead(br)
	if err != nil {
		return nil, target{}, err
	}
	hosts, err := hostHeaders(head)
	if err != nil {
		return nil, target{}, err
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, target{}, badf("malformed proxy request")
	}
	if req.Method == http.MethodConnect {
		t, err := parseAuthority(req.RequestURI, 0)
		t.scheme = schemeHTTPS
		if err == nil && t.port == 80 {
			// Port 80 carries plain HTTP, whose Host header the proxy
			// checks only on a plain request; clients send http:// URLs
			// that way, not through CONNECT.
			return nil, t, badf("CONNECT to port 80 is refused: send http:// requests to the proxy as plain requests")
		}
		return req, t, err
	}
	if req.URL.Scheme != schemeHTTP || req.URL.Host == "" {
		return nil, target{}, badf("the proxy takes CONNECT host:port or an absolute http:// URL")
	}
	t, err := parseAuthority(req.URL.Host, 80)
	if err != nil {
		return nil, target{}, err
	}
	t.scheme = schemeHTTP
	if len(hosts) != 1 {
		return nil, target{}, badf("a plain HTTP request needs exactly one Host header")
	}
	h, err := parseAuthority(hosts[0], 80)
	if err != nil || h.host != t.host || h.port != t.port {
		return nil, target{}, badf("the Host header %q does not match the request's host %s", hosts[0], t)
	}
	return req, t, nil
}

// peekHead returns the request line and headers without consuming them.
func peekHead(br *bufio.Reader) ([]byte, error) {
	for {
		buf, _ := br.Peek(br.Buffered())
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			return buf[:i+4], nil
		}
		if i := bytes.Index(buf, []byte("\n\n")); i >= 0 {
			return buf[:i+2], nil
		}
		if len(buf) >= maxHeadBytes {
			return nil, badf("the proxy request's headers exceed %d bytes", maxHeadBytes)
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			if errors.Is(err, io.EOF) && len(buf) == 0 {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("read proxy request: %w", err)
		}
	}
}

func hostHeaders(head []byte) ([]string, error) {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return nil, badf("malformed proxy request")
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, badf("malformed proxy request headers")
	}
	return h.Values("Host"), nil
}

// parseAuthority splits host[:port]; def is the port when none is given
// (0: a port is required).
func parseAuthority(s string, def int) (target, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		if def == 0 {
			return target{}, badf("%q is not host:port", s)
		}
		host, portStr = strings.Trim(s, "[]"), strconv.Itoa(def)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return target{}, badf("%q has no valid port", s)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" || strings.ContainsAny(host, "/@ ") {
		return target{}, badf("%q has no valid host", s)
	}
	return target{host: host, port: port}, nil
}

func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}
