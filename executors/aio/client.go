package aio

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
)

// Client speaks the AIO sandbox HTTP API (aio-api.md §1–2) to one sandbox:
// sandboxd, or the real agent-infra image (≥ 1.9.3 for /v1/bash). It is a
// thin hand-written client: every optional response field is a pointer,
// because the server sends explicit nulls.
//
// Nothing is retried. Go's transport never replays a POST, and the client
// adds no retry of its own: an exec whose outcome is unknown (a transport
// error after the request was sent) must not run twice.
type Client struct {
	base string
	key  string
	hc   *http.Client
	tr   *http.Transport
}

// NewUnixClient returns a client for a sandbox listening on a Unix socket.
func NewUnixClient(socket, key string) *Client {
	var d net.Dialer
	tr := newTransport(func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", socket)
	})
	return &Client{base: "http://sandbox", key: key, hc: &http.Client{Transport: tr}, tr: tr}
}

// NewHTTPClient returns a client for a sandbox at baseURL
// ("http://127.0.0.1:PORT"). The environment's HTTP proxy is never used
// (deer-flow #3441: a proxy answering for loopback URLs).
func NewHTTPClient(baseURL, key string) *Client {
	var d net.Dialer
	tr := newTransport(d.DialContext)
	return &Client{base: strings.TrimSuffix(baseURL, "/"), key: key, hc: &http.Client{Transport: tr}, tr: tr}
}

func newTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         dial,
		MaxIdleConns:        32,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
		// Upgraded (WebSocket) connections through the CDP forwarder need
		// HTTP/1.1.
		ForceAttemptHTTP2: false,
	}
}

// Close drops the client's idle connections.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// ErrEndpointMissing is wrapped by the error of a call to a route the
// server does not have (a plain 404, FastAPI's {"detail":"Not Found"}): an
// image older than the API this client needs.
var ErrEndpointMissing = errors.New("endpoint missing")

// ErrUnauthorized is wrapped when the server refuses the API key.
var ErrUnauthorized = errors.New("sandbox refused the API key")

// APIError is a request the server answered but did not carry out: an
// envelope with success:false, a 4xx/5xx, or a 422 validation failure.
type APIError struct {
	Method, Path string
	Status       int
	Message      string
	// Data is the envelope's data, when the server sent one (a
	// FileOperationError, say).
	Data json.RawMessage
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Status, e.Message)
}

// envelope is the AIO Response[T] with data left raw.
type envelope struct {
	Success *bool           `json:"success"`
	Message *string         `json:"message"`
	Data    json.RawMessage `json:"data"`
	Hint    *string         `json:"hint"`
}

// maxResponse bounds a JSON response (two base64 output caps and slack).
const maxResponse = 128 << 20

// call sends one JSON request and decodes the envelope's data into out.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	return c.callStream(ctx, method, path, in, out, nil, nil)
}

// callStream is call for a request that may be answered as a stream
// (x_sandgate.stream): each output line goes to onChunk as it arrives,
// and the last line's envelope is decoded into out as call decodes a
// whole answer. An answer that is not a stream (an error found before
// the run started, or a server that ignores the extension) is decoded as
// call does. With a nil onChunk only JSON is accepted. A release holds
// the run (heldBody).
func (c *Client) callStream(ctx context.Context, method, path string, in, out any, onChunk func(aiowire.StreamEvent), release func(context.Context) error) (err error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		if release != nil {
			held := newHeldBody(ctx, b, release)
			defer held.Close()
			defer func() {
				if rerr := held.failed(); rerr != nil {
					err = rerr
				}
			}()
			body = held
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if release != nil {
		req.Header.Set(aiowire.HoldHeader, "1")
	}
	req.Header.Set("Accept", "application/json")
	if onChunk != nil {
		req.Header.Set("Accept", aiowire.StreamMediaType+", application/json")
	}
	req.Header.Set("X-AIO-API-Key", c.key)
	res, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	limited := io.LimitReader(res.Body, maxResponse)
	if onChunk != nil && res.StatusCode == http.StatusOK && isStream(res.Header.Get("Content-Type")) {
		return readStream(method, path, limited, out, onChunk)
	}
	raw, err := io.ReadAll(limited)
	if err != nil {
		return fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	return decode(method, path, res.StatusCode, raw, out)
}

func isStream(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == aiowire.StreamMediaType
}

// errStreamEnded is a streamed answer that ended without its result line.
var errStreamEnded = errors.New("streamed answer ended without a result")

// readStream reads a streamed answer: chunks to onChunk, then the
// envelope into out.
func readStream(method, path string, r io.Reader, out any, onChunk func(aiowire.StreamEvent)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxResponse)
	for sc.Scan() {
		var ev aiowire.StreamEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("%s %s: stream line: %w", method, path, err)
		}
		if ev.Result != nil {
			return decode(method, path, http.StatusOK, ev.Result, out)
		}
		onChunk(ev)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s %s: read stream: %w", method, path, err)
	}
	return fmt.Errorf("%s %s: %w", method, path, errStreamEnded)
}

// decode checks, in order (aio-api.md §1.3): the HTTP status, the
// envelope's success, and then decodes data.
func decode(method, path string, status int, raw []byte, out any) error {
	var env envelope
	jerr := json.Unmarshal(raw, &env)
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("%s %s: %w (HTTP %d)", method, path, ErrUnauthorized, status)
	case status == http.StatusNotFound && (jerr != nil || env.Success == nil):
		// A route the server does not have: FastAPI's {"detail":"Not
		// Found"} (or nginx's HTML). An envelope 404 is a handled
		// failure ("Session not found") and falls through.
		return fmt.Errorf("%s %s: %w", method, path, ErrEndpointMissing)
	case status == http.StatusUnprocessableEntity:
		return &APIError{Method: method, Path: path, Status: status, Message: "request rejected by validation: " + truncate(string(raw), 512)}
	case jerr != nil || env.Success == nil:
		return &APIError{Method: method, Path: path, Status: status, Message: "not an AIO envelope: " + truncate(string(raw), 256)}
	case status < 200 || status > 299 || !*env.Success:
		msg := ""
		if env.Message != nil {
			msg = *env.Message
		}
		return &APIError{Method: method, Path: path, Status: status, Message: msg, Data: env.Data}
	}
	if out == nil || len(env.Data) == 0 || string(env.Data) == "null" {
		return nil
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("%s %s: decode data: %w", method, path, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// SandboxInfo is the part of GET /v1/sandbox the gateway uses.
type SandboxInfo struct {
	HomeDir   string  `json:"home_dir"`
	Workspace *string `json:"workspace"`
	Version   string  `json:"version"`
}

// Sandbox calls GET /v1/sandbox, the readiness probe. The response is not
// an ordinary envelope: home_dir and version are top-level.
func (c *Client) Sandbox(ctx context.Context) (SandboxInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/sandbox", nil)
	if err != nil {
		return SandboxInfo{}, err
	}
	req.Header.Set("X-AIO-API-Key", c.key)
	res, err := c.hc.Do(req)
	if err != nil {
		return SandboxInfo{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return SandboxInfo{}, err
	}
	var info SandboxInfo
	if err := decode(http.MethodGet, "/v1/sandbox", res.StatusCode, raw, nil); err != nil {
		return info, err
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		return info, fmt.Errorf("GET /v1/sandbox: %w", err)
	}
	return info, nil
}

// The x_sandgate wire types sandboxd (cmd/sandboxd) shares with this
// client; other servers ignore the request part and never send the
// response part.
type (
	RunExtension = aiowire.RunExtension
	RunEgress    = aiowire.RunEgress
	RunLimits    = aiowire.RunLimits
	RunOutput    = aiowire.RunOutput
	StreamEvent  = aiowire.StreamEvent
)

// BashExecRequest is POST /v1/bash/exec's body.
type BashExecRequest struct {
	Command         string            `json:"command"`
	SessionID       string            `json:"session_id,omitempty"`
	ExecDir         string            `json:"exec_dir,omitempty"`
	Env             map[string]string `json:"env,omitempty"`
	AsyncMode       bool              `json:"async_mode,omitempty"`
	Timeout         *float64          `json:"timeout,omitempty"`
	HardTimeout     *float64          `json:"hard_timeout,omitempty"`
	MaxOutputLength *int              `json:"max_output_length,omitempty"`
	XSandgate       *RunExtension     `json:"x_sandgate,omitempty"`
	// Release, when set, holds the run (aiowire.HoldHeader) until it
	// returns nil; on an error the run is discarded, never started.
	Release func(context.Context) error `json:"-"`
}

// BashExecResult is its data.
type BashExecResult = aiowire.BashExecResult

// BashExec calls POST /v1/bash/exec.
func (c *Client) BashExec(ctx context.Context, req BashExecRequest) (BashExecResult, error) {
	return c.BashExecStream(ctx, req, nil)
}

// BashExecStream is BashExec with the output streamed to onChunk while
// the command runs: it asks sandboxd for a streamed answer
// (x_sandgate.stream; req.XSandgate must be set). Any other server
// answers as BashExec, and onChunk is never called. A nil onChunk is
// BashExec.
func (c *Client) BashExecStream(ctx context.Context, req BashExecRequest, onChunk func(aiowire.StreamEvent)) (BashExecResult, error) {
	req.XSandgate = streamed(req.XSandgate, onChunk)
	var res BashExecResult
	err := c.callStream(ctx, http.MethodPost, "/v1/bash/exec", req, &res, onChunk, req.Release)
	return res, err
}

// streamed returns x asking for a streamed answer when onChunk is set (a
// copy: the caller's request is not changed).
func streamed(x *RunExtension, onChunk func(aiowire.StreamEvent)) *RunExtension {
	if x == nil || onChunk == nil {
		return x
	}
	c := *x
	c.Stream = true
	return &c
}

// BashSessionCreate calls POST /v1/bash/sessions/create.
func (c *Client) BashSessionCreate(ctx context.Context, sessionID, execDir string) error {
	body := map[string]string{"session_id": sessionID}
	if execDir != "" {
		body["exec_dir"] = execDir
	}
	return c.call(ctx, http.MethodPost, "/v1/bash/sessions/create", body, nil)
}

// BashSessionClose calls POST /v1/bash/sessions/{id}/close.
func (c *Client) BashSessionClose(ctx context.Context, sessionID string) error {
	return c.call(ctx, http.MethodPost, "/v1/bash/sessions/"+sessionID+"/close", nil, nil)
}

// BashKill calls POST /v1/bash/kill with SIGKILL.
func (c *Client) BashKill(ctx context.Context, sessionID string) error {
	return c.call(ctx, http.MethodPost, "/v1/bash/kill", map[string]string{"session_id": sessionID, "signal": "SIGKILL"}, nil)
}

// CodeExecuteRequest is POST /v1/code/execute's body.
type CodeExecuteRequest struct {
	Language string `json:"language"`
	Code     string `json:"code"`
	Timeout  *int   `json:"timeout,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
	// Stateful runs the code in the Jupyter kernel of SessionID (the AIO
	// API's stateful mode).
	Stateful  bool          `json:"stateful,omitempty"`
	SessionID string        `json:"session_id,omitempty"`
	XSandgate *RunExtension `json:"x_sandgate,omitempty"`
	// Release holds the run, as BashExecRequest's.
	Release func(context.Context) error `json:"-"`
}

// CodeOutput is one of a code run's Jupyter outputs.
type CodeOutput struct {
	OutputType string                     `json:"output_type"`
	Data       map[string]json.RawMessage `json:"data,omitempty"`
}

// CodeExecuteResult is its data.
type CodeExecuteResult struct {
	Language  string       `json:"language"`
	Status    string       `json:"status"`
	Stdout    *string      `json:"stdout"`
	Stderr    *string      `json:"stderr"`
	ExitCode  *int         `json:"exit_code"`
	Traceback []string     `json:"traceback"`
	Outputs   []CodeOutput `json:"outputs"`
	XSandgate *RunOutput   `json:"x_sandgate"`
}

// CodeExecute calls POST /v1/code/execute.
func (c *Client) CodeExecute(ctx context.Context, req CodeExecuteRequest) (CodeExecuteResult, error) {
	return c.CodeExecuteStream(ctx, req, nil)
}

// CodeExecuteStream is CodeExecute with the output streamed to onChunk,
// as BashExecStream.
func (c *Client) CodeExecuteStream(ctx context.Context, req CodeExecuteRequest, onChunk func(aiowire.StreamEvent)) (CodeExecuteResult, error) {
	req.XSandgate = streamed(req.XSandgate, onChunk)
	var res CodeExecuteResult
	err := c.callStream(ctx, http.MethodPost, "/v1/code/execute", req, &res, onChunk, req.Release)
	return res, err
}

// BrowserInfo is GET /v1/browser/info's data.
type BrowserInfo struct {
	UserAgent string `json:"user_agent"`
	CDPURL    string `json:"cdp_url"`
	VNCURL    string `json:"vnc_url"`
}

// BrowserInfo calls GET /v1/browser/info (sandboxd starts Chromium then).
func (c *Client) BrowserInfo(ctx context.Context) (BrowserInfo, error) {
	var res BrowserInfo
	err := c.call(ctx, http.MethodGet, "/v1/browser/info", nil, &res)
	return res, err
}

// JupyterSessionDelete calls DELETE /v1/jupyter/sessions/{id}: the
// session's kernel is killed.
func (c *Client) JupyterSessionDelete(ctx context.Context, sessionID string) error {
	return c.call(ctx, http.MethodDelete, "/v1/jupyter/sessions/"+sessionID, nil, nil)
}
