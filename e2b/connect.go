package e2b

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Connect protocol (connectrpc.com's HTTP protocol), JSON codec only,
// as envd's clients speak it (research/e2b-compat.md §3.4). Written from
// the protocol's specification and the traffic observed; no generated
// code. Both SDKs use the JSON codec (useBinaryFormat: false), so the
// binary codec and compression are refused.
//
//   - unary: POST /<pkg>.<Service>/<Method>, Content-Type application/json,
//     a JSON body; the answer is 200 application/json, or an error status
//     with {"code": "<connect code>", "message": ...};
//   - server streaming: Content-Type application/connect+json; the request
//     body is one envelope, the answer a sequence of envelopes, each a flag
//     byte, a 4-byte big-endian length and JSON; the last has flag 0x02
//     and carries {} or {"error": {...}}.

// Connect error codes (the protocol's names).
const (
	codeCanceled           = "canceled"
	codeInvalidArgument    = "invalid_argument"
	codeDeadlineExceeded   = "deadline_exceeded"
	codeNotFound           = "not_found"
	codeAlreadyExists      = "already_exists"
	codePermissionDenied   = "permission_denied"
	codeResourceExhausted  = "resource_exhausted"
	codeFailedPrecondition = "failed_precondition"
	codeUnimplemented      = "unimplemented"
	codeInternal           = "internal"
	codeUnavailable        = "unavailable"
	codeUnauthenticated    = "unauthenticated"
)

// rpcError is a Connect error: its code and a message safe to show.
type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *rpcError) Error() string { return e.Code + ": " + e.Message }

func rpcErr(code, msg string) *rpcError { return &rpcError{Code: code, Message: msg} }

// httpStatus is the HTTP status a unary error is answered with (the
// protocol's table); the client reads the code from the body.
func (e *rpcError) httpStatus() int {
	switch e.Code {
	case codeCanceled:
		return 499
	case codeInvalidArgument, codeFailedPrecondition:
		return http.StatusBadRequest
	case codeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case codeNotFound, codeUnimplemented:
		return http.StatusNotFound
	case codeAlreadyExists:
		return http.StatusConflict
	case codePermissionDenied:
		return http.StatusForbidden
	case codeResourceExhausted:
		return http.StatusTooManyRequests
	case codeUnavailable:
		return http.StatusServiceUnavailable
	case codeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// Media types of the JSON codec.
const (
	mediaUnary  = "application/json"
	mediaStream = "application/connect+json"
)

// maxMessage bounds a request message: envd's requests are a command
// line, a path or a pid.
const maxMessage = 1 << 20

// Envelope flags.
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// readUnary decodes a unary request's JSON body into v. Unknown fields
// are ignored, as proto3 JSON parsers do by default.
func readUnary(r *http.Request, v any) *rpcError {
	if ct := mediaType(r); ct != mediaUnary {
		return rpcErr(codeInvalidArgument, "only the Connect JSON codec is served (Content-Type application/json)")
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return rpcErr(codeUnimplemented, "compressed requests are not served")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
	if err != nil || len(body) > maxMessage {
		return rpcErr(codeResourceExhausted, "the request message is too large or could not be read")
	}
	return decodeMessage(body, v)
}

// readStreamRequest reads the one enveloped message of a server-streaming
// request.
func readStreamRequest(r *http.Request, v any) *rpcError {
	if ct := mediaType(r); ct != mediaStream {
		return rpcErr(codeInvalidArgument, "only the Connect JSON codec is served (Content-Type application/connect+json)")
	}
	var head [5]byte
	if _, err := io.ReadFull(r.Body, head[:]); err != nil {
		return rpcErr(codeInvalidArgument, "the request has no enveloped message")
	}
	if head[0]&flagCompressed != 0 {
		return rpcErr(codeUnimplemented, "compressed messages are not served")
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > maxMessage {
		return rpcErr(codeResourceExhausted, "the request message is too large")
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return rpcErr(codeInvalidArgument, "the request message is cut short")
	}
	return decodeMessage(body, v)
}

func decodeMessage(body []byte, v any) *rpcError {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return rpcErr(codeInvalidArgument, "the request message is not valid JSON for this method")
	}
	return nil
}

// mediaType is r's media type, without parameters.
func mediaType(r *http.Request) string {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(ct))
}

// writeUnary answers a unary call with v.
func writeUnary(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", mediaUnary)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

// writeUnaryError answers a unary call with e.
func writeUnaryError(w http.ResponseWriter, e *rpcError) {
	w.Header().Set("Content-Type", mediaUnary)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(e.httpStatus())
	_ = json.NewEncoder(w).Encode(e)
}

// streamWriter writes one server-streaming answer: enveloped messages,
// each flushed at once, and the end-stream envelope. Each write gets its
// own deadline (writeTimeout) instead of the server's WriteTimeout, so a
// command held for approval and then running long is not cut while its
// client reads. It is safe for concurrent use.
type streamWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	started bool
	ended   bool
	broken  bool
}

func newStreamWriter(w http.ResponseWriter, timeout time.Duration) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

// send writes one message; false when the client is gone.
func (s *streamWriter) send(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	return s.envelope(0, b)
}

// end writes the end-stream envelope, with err when not nil.
func (s *streamWriter) end(err *rpcError) {
	var b []byte
	if err != nil {
		b, _ = json.Marshal(struct {
			Error *rpcError `json:"error"`
		}{err})
	} else {
		b = []byte("{}")
	}
	s.envelope(flagEndStream, b)
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
}

func (s *streamWriter) envelope(flags byte, msg []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken || s.ended {
		return false
	}
	if !s.started {
		h := s.w.Header()
		h.Set("Content-Type", mediaStream)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	buf := make([]byte, 5, 5+len(msg))
	buf[0] = flags
	binary.BigEndian.PutUint32(buf[1:], uint32(len(msg)))
	buf = append(buf, msg...)
	if _, err := s.w.Write(buf); err != nil {
		s.broken = true
		return false
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.broken = true
		return false
	}
	return true
}

// connectTimeout is the Connect-Timeout-Ms header's budget; zero when
// absent or malformed (no deadline but the gateway's own).
func connectTimeout(r *http.Request) time.Duration {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
