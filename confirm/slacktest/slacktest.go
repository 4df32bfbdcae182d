// Package slacktest is a loopback stand-in for the parts of Slack that the
// approval channel uses (Slack cannot be reached from the tests): the Web
// API methods chat.postMessage and chat.update, with their documented
// request and answer shapes, and the interactivity requests Slack sends an
// app when a user clicks a button, signed exactly as Slack signs them.
//
// Web API: a POST to /api/<method> with "Authorization: Bearer <token>" and
// a JSON body; the answer is HTTP 200 with {"ok": true, ...} or
// {"ok": false, "error": "<code>"} (not_authed without a token,
// invalid_auth with a wrong one, channel_not_found, message_not_found,
// invalid_blocks, no_text), or HTTP 429 with Retry-After when rate limited.
//
// Interactivity: a POST, application/x-www-form-urlencoded, whose payload
// field is a block_actions JSON payload; X-Slack-Request-Timestamp is the
// Unix time and X-Slack-Signature "v0=" + hex(HMAC-SHA256(signing secret,
// "v0:" + timestamp + ":" + body)).
package slacktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is the stand-in. Its Web API base URL is APIURL().
type Server struct {
	srv *httptest.Server
	// Token is the bot token the API accepts; SigningSecret signs the
	// callbacks; Channels are the channel ids that exist.
	Token, SigningSecret string
	Channels             []string
	TeamID               string

	mu       sync.Mutex
	calls    []Call
	messages []*Message
	fails    []Failure
	seq      int
	changed  chan struct{} // closed and replaced on every call
}

// Call is one Web API call as the server received it.
type Call struct {
	Method        string
	Authorization string
	ContentType   string
	Body          map[string]any
	// Answer is what the server answered: "ok", or the error code.
	Answer string
}

// Message is a posted message and its current content.
type Message struct {
	Channel, TS, Text string
	Blocks            []map[string]any
	// Updates counts chat.update calls on it.
	Updates int
}

// Failure is an injected failure of the next call: an HTTP status other
// than 200 (RetryAfter seconds with 429), or a Slack error code with 200.
type Failure struct {
	Status     int
	Error      string
	RetryAfter int
}

// New starts a server; it is closed when the test ends.
func New(t testing.TB) *Server {
	s := &Server{Token: "xoxb-1-sandgate-test", SigningSecret: "8f742231b10e8888abcd99yyyzzz85a5", Channels: []string{"C0APPROVALS"},
		TeamID: "T0SANDGATE", changed: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// APIURL is the Web API's base (https://slack.com/api in production).
func (s *Server) APIURL() string { return s.srv.URL + "/api" }

// FailNext makes the next calls fail, one failure each.
func (s *Server) FailNext(f ...Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails = append(s.fails, f...)
}

// Calls returns the calls so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Messages returns copies of the messages posted so far.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.messages))
	for i, m := range s.messages {
		out[i] = *m
	}
	return out
}

// Wait waits until cond holds over the messages, or fails the test after
// timeout.
func (s *Server) Wait(t testing.TB, timeout time.Duration, what string, cond func([]Message) bool) []Message {
	t.Helper()
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if ms := s.Messages(); cond(ms) {
			return ms
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("slacktest: timed out waiting for %s; calls: %+v", what, s.Calls())
			return nil
		}
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	c := Call{Method: method, Authorization: r.Header.Get("Authorization"), ContentType: r.Header.Get("Content-Type")}
	_ = json.Unmarshal(raw, &c.Body)

	s.mu.Lock()
	defer func() {
		s.calls = append(s.calls, c)
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}()
	if len(s.fails) > 0 {
		f := s.fails[0]
		s.fails = s.fails[1:]
		if f.Status != 0 && f.Status != http.StatusOK {
			c.Answer = "HTTP " + strconv.Itoa(f.Status)
			if f.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfter))
			}
			w.WriteHeader(f.Status)
			return
		}
		c.Answer = f.Error
		writeJSON(w, map[string]any{"ok": false, "error": f.Error})
		return
	}
	answer, errCode := s.apply(method, r, c.Body)
	if errCode != "" {
		c.Answer = errCode
		writeJSON(w, map[string]any{"ok": false, "error": errCode})
		return
	}
	c.Answer = "ok"
	answer["ok"] = true
	writeJSON(w, answer)
}

// apply runs one authenticated, well-formed call; s.mu is held.
func (s *Server) apply(method string, r *http.Request, body map[string]any) (map[string]any, string) {
	auth := r.Header.Get("Authorization")
	switch {
	case auth == "":
		return nil, "not_authed"
	case auth != "Bearer "+s.Token:
		return nil, "invalid_auth"
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" || body == nil {
		return nil, "invalid_arguments"
	}
	channel, _ := body["channel"].(string)
	known := false
	for _, c := range s.Channels {
		known = known || c == channel
	}
	if !known {
		return nil, "channel_not_found"
	}
	text, _ := body["text"].(string)
	blocks, err := checkBlocks(body["blocks"])
	if err != "" {
		return nil, err
	}
	if text == "" && blocks == nil {
		return nil, "no_text"
	}
	switch method {
	case "chat.postMessage":
		s.seq++
		m := &Message{Channel: channel, TS: fmt.Sprintf("%d.%06d", 1700000000+s.seq, s.seq), Text: text, Blocks: blocks}
		s.messages = append(s.messages, m)
		return map[string]any{"channel": channel, "ts": m.TS, "message": messageJSON(m)}, ""
	case "chat.update":
		ts, _ := body["ts"].(string)
		for _, m := range s.messages {
			if m.Channel == channel && m.TS == ts {
				m.Text, m.Blocks = text, blocks
				m.Updates++
				return map[string]any{"channel": channel, "ts": ts, "text": text, "message": messageJSON(m)}, ""
			}
		}
		return nil, "message_not_found"
	}
	return nil, "unknown_method"
}

func messageJSON(m *Message) map[string]any {
	return map[string]any{"type": "message", "subtype": "bot_message", "bot_id": "B0SANDGATE", "text": m.Text, "ts": m.TS, "blocks": m.Blocks}
}

// checkBlocks holds blocks to Block Kit's documented limits for the block
// and element types the channel uses; a violation is invalid_blocks, as
// Slack answers.
func checkBlocks(v any) ([]map[string]any, string) {
	if v == nil {
		return nil, ""
	}
	list, ok := v.([]any)
	if !ok || len(list) > 50 {
		return nil, "invalid_blocks"
	}
	out := make([]map[string]any, 0, len(list))
	textOK := func(t any, typ string, n int) bool {
		o, ok := t.(map[string]any)
		if !ok {
			return false
		}
		s, _ := o["text"].(string)
		return (typ == "" || o["type"] == typ) && (o["type"] == "plain_text" || o["type"] == "mrkdwn") && s != "" && len([]rune(s)) <= n
	}
	for _, b := range list {
		blk, ok := b.(map[string]any)
		if !ok {
			return nil, "invalid_blocks"
		}
		switch blk["type"] {
		case "header":
			if !textOK(blk["text"], "plain_text", 150) {
				return nil, "invalid_blocks"
			}
		case "section":
			fields, _ := blk["fields"].([]any)
			if blk["text"] == nil && len(fields) == 0 || len(fields) > 10 {
				return nil, "invalid_blocks"
			}
			if blk["text"] != nil && !textOK(blk["text"], "", 3000) {
				return nil, "invalid_blocks"
			}
			for _, f := range fields {
				if !textOK(f, "", 2000) {
					return nil, "invalid_blocks"
				}
			}
		case "context":
			els, _ := blk["elements"].([]any)
			if len(els) == 0 || len(els) > 10 {
				return nil, "invalid_blocks"
			}
			for _, e := range els {
				if !textOK(e, "", 3000) {
					return nil, "invalid_blocks"
				}
			}
		case "actions":
			els, _ := blk["elements"].([]any)
			if len(els) == 0 || len(els) > 25 {
				return nil, "invalid_blocks"
			}
			for _, e := range els {
				el, _ := e.(map[string]any)
				id, _ := el["action_id"].(string)
				val, _ := el["value"].(string)
				style, _ := el["style"].(string)
				if el["type"] != "button" || !textOK(el["text"], "plain_text", 75) || id == "" || len(id) > 255 || len(val) > 2000 ||
					(style != "" && style != "primary" && style != "danger") {
					return nil, "invalid_blocks"
				}
			}
		default:
			return nil, "invalid_blocks"
		}
		out = append(out, blk)
	}
	return out, ""
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

// Button returns the block_id and the button element with actionID in m,
// or false.
func (m Message) Button(actionID string) (blockID string, button map[string]any, ok bool) {
	for _, b := range m.Blocks {
		if b["type"] != "actions" {
			continue
		}
		els, _ := b["elements"].([]any)
		for _, e := range els {
			if el, _ := e.(map[string]any); el["action_id"] == actionID {
				id, _ := b["block_id"].(string)
				return id, el, true
			}
		}
	}
	return "", nil, false
}

// Click is one interactivity request.
type Click struct {
	// UserID clicked ActionID in Message.
	UserID, ActionID string
	Message          Message
	// At is the request's timestamp (default now); Secret signs it
	// (default the server's SigningSecret); BadSignature sends a
	// signature of another body.
	At           time.Time
	Secret       string
	BadSignature bool
}

// Payload is the block_actions payload of c, as Slack builds it.
func (s *Server) Payload(c Click) ([]byte, error) {
	blockID, btn, ok := c.Message.Button(c.ActionID)
	if !ok {
		return nil, fmt.Errorf("slacktest: no button %q in the message", c.ActionID)
	}
	p := map[string]any{
		"type":       "block_actions",
		"user":       map[string]any{"id": c.UserID, "username": strings.ToLower(c.UserID), "name": strings.ToLower(c.UserID), "team_id": s.TeamID},
		"api_app_id": "A0SANDGATE",
		"token":      "verification-token-deprecated",
		"container":  map[string]any{"type": "message", "message_ts": c.Message.TS, "channel_id": c.Message.Channel, "is_ephemeral": false},
		"trigger_id": "1700000000.1.abcdef",
		"team":       map[string]any{"id": s.TeamID, "domain": "sandgate"},
		"enterprise": nil, "is_enterprise_install": false,
		"channel":      map[string]any{"id": c.Message.Channel, "name": "approvals"},
		"message":      messageJSON(&c.Message),
		"state":        map[string]any{"values": map[string]any{}},
		"response_url": "https://hooks.slack.com/actions/T0SANDGATE/1/abc",
		"actions": []any{map[string]any{"action_id": c.ActionID, "block_id": blockID, "text": btn["text"], "value": btn["value"],
			"style": btn["style"], "type": "button", "action_ts": strconv.FormatInt(time.Now().Unix(), 10) + ".000001"}},
	}
	return json.Marshal(p)
}

// Sign is X-Slack-Signature of body at ts.
func Sign(secret, ts string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:", ts)
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// Request is c as the HTTP request Slack sends to the app's Request URL.
func (s *Server) Request(requestURL string, c Click) (*http.Request, error) {
	payload, err := s.Payload(c)
	if err != nil {
		return nil, err
	}
	body := []byte("payload=" + url.QueryEscape(string(payload)))
	at := c.At
	if at.IsZero() {
		at = time.Now()
	}
	secret := c.Secret
	if secret == "" {
		secret = s.SigningSecret
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	sig := Sign(secret, ts, body)
	if c.BadSignature {
		sig = Sign(secret, ts, append(body, '&'))
	}
	req, err := http.NewRequest(http.MethodPost, requestURL, strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", sig)
	return req, nil
}

// Send sends c to requestURL and returns the answer's status.
func (s *Server) Send(requestURL string, c Click) (int, error) {
	req, err := s.Request(requestURL, c)
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, nil
}
