package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// errStopHandshake ends the handshake once the ClientHello is read.
var errStopHandshake = errors.New("egress: client hello read")

// peekClientHello reads the TLS ClientHello from r and returns its server
// name and the bytes read, which the caller forwards untouched: TLS stays
// end to end. crypto/tls parses the hello (no hand-written parser); the
// handshake is abandoned in GetConfigForClient before anything is written.
func peekClientHello(r io.Reader) (serverName string, consumed []byte, err error) {
	var buf bytes.Buffer
	var hello *tls.ClientHelloInfo
	conn := readOnlyConn{r: io.TeeReader(r, &buf)}
	err = tls.Server(conn, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = h
			return nil, errStopHandshake
		},
	}).Handshake()
	if hello == nil {
		if err == nil {
			err = errors.New("egress: no client hello")
		}
		return "", buf.Bytes(), err
	}
	return hello.ServerName, buf.Bytes(), nil
}

// readOnlyConn is a net.Conn that only reads; the aborted server
// handshake may try to write an alert, which is dropped.
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnlyConn) Write(p []byte) (int, error)      { return len(p), nil }
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return nil }
func (readOnlyConn) RemoteAddr() net.Addr             { return nil }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
