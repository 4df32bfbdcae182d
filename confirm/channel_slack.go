package confirm

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/errcode"
)

// Slack's documented protocol, as this channel uses it:
//
//   - Web API methods are POSTs to https://slack.com/api/<method> with
//     "Authorization: Bearer <bot token>" and a JSON body
//     ("Content-Type: application/json; charset=utf-8"); the answer is a
//     JSON object with "ok": true, or "ok": false and an "error" code. A
//     rate-limited call is HTTP 429 with Retry-After (seconds).
//   - chat.postMessage {channel, text, blocks} answers {ok, channel, ts};
//     chat.update {channel, ts, text, blocks} rewrites that message.
//   - A click on a Block Kit button is an interactivity request to the
//     app's Request URL: a POST, application/x-www-form-urlencoded, whose
//     "payload" field is the JSON of a block_actions payload (type, user,
//     team, container, actions[{action_id, value}], ...). Slack signs it:
//     X-Slack-Request-Timestamp (Unix seconds) and X-Slack-Signature, "v0="
//     and the hex HMAC-SHA256, keyed with the app's signing secret, of
//     "v0:" + timestamp + ":" + the raw body. A request more than five
//     minutes from now is refused (a replay). The app answers 200 within
//     three seconds.

// Defaults and limits of the Slack channel.
const (
	DefaultSlackAPIURL = "https://slack.com/api"
	// SlackMaxSkew is Slack's window for a request's timestamp.
	SlackMaxSkew = 5 * time.Minute
	// maxSlackCallback bounds an interactivity request's body.
	maxSlackCallback = 1 << 20
	// slackActionsBlock is the block_id of the decision buttons.
	slackActionsBlock = "sandgate_decision"
	slackApprove      = "approve"
	slackDeny         = "deny"
	// slackApproveSession allows a network request's host for the rest
	// of its session, or approves a run with a grant for its session
	// (SessionGrantFor); slackApprovePattern approves a run with a grant
	// for its patterns in its tenant (PatternGrantFor). As on the page.
	slackApproveSession = "approve_session"
	slackApprovePattern = "approve_pattern"
	// slackApproveGrant approves a held egress request with a grant for
	// its method, host and path (and beneath) in its session for
	// SessionGrantFor (grants_egress.go).
	slackApproveGrant = "approve_grant"
)

// Secret is a credential read from the configuration: it never prints,
// in logs, errors or %v.
type Secret string

// LogValue keeps the secret out of logs.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// String keeps the secret out of %v and %s.
func (Secret) String() string { return "[redacted]" }

// GoString keeps the secret out of %#v.
func (Secret) GoString() string { return "[redacted]" }

// SlackOptions configures a Slack app channel.
type SlackOptions struct {
	Name  string
	Route Route
	// APIURL is the Web API's base; default DefaultSlackAPIURL.
	APIURL string
	// BotToken is the app's bot token (xoxb-...), sent as a bearer.
	BotToken Secret
	// SigningSecret verifies the interactivity requests.
	SigningSecret Secret
	// Channel is the Slack channel (an id such as C0123ABCD) the
	// requests are posted to.
	Channel string
	// TeamID, when set, is the only workspace whose clicks are accepted.
	TeamID string
	// Users maps Slack user ids to approver principals. A click from a
	// user not listed is refused and audited.
	Users map[string]string
	// PageURL is the approval page's base URL, for the message's link.
	PageURL string
	// Audit records every callback: decisions, and refusals with why.
	// nil records nothing.
	Audit audit.Store
	// Logger; nil discards.
	Logger *slog.Logger
	// Client makes the Web API calls (redirects are never followed); nil
	// is a client of its own. Timeout bounds each call: default
	// DefaultChannelTimeout.
	Client  *http.Client
	Timeout time.Duration
	// Grants adds to a run's message the grants the page offers: approve
	// for this session for SessionGrantFor, or for this pattern in this
	// tenant for PatternGrantFor (set it when the hub has grants).
	Grants bool
}

// Slack is an approval channel to a Slack app: it posts each held request
// as a Block Kit message with Approve and Deny buttons, takes the clicks
// back as signed interactivity requests, and rewrites the message when the
// request is resolved, wherever it was decided.
type Slack struct {
	opts   SlackOptions
	api    string
	client *http.Client
	log    *slog.Logger
	// refusals bounds the audit records of unverified callbacks (bad
	// signature or stale), which anyone can send.
	refusals *rate.Limiter
}

// NewSlack checks opts and returns the channel.
func NewSlack(opts SlackOptions) (*Slack, error) {
	var errs []error
	if opts.BotToken == "" {
		errs = append(errs, errors.New("bot_token is required"))
	}
	if opts.SigningSecret == "" {
		errs = append(errs, errors.New("signing_secret is required"))
	}
	if opts.Channel == "" {
		errs = append(errs, errors.New("channel is required"))
	}
	if opts.APIURL == "" {
		opts.APIURL = DefaultSlackAPIURL
	}
	if u, err := url.Parse(opts.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, errors.New("api_url: want an http or https URL"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("slack channel %s: %w", opts.Name, errors.Join(errs...))
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultChannelTimeout
	}
	c := &http.Client{Transport: http.DefaultTransport}
	if opts.Client != nil {
		*c = *opts.Client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Slack{opts: opts, api: strings.TrimRight(opts.APIURL, "/"), client: c, log: log.With("channel", opts.Name),
		refusals: rate.NewLimiter(rate.Every(time.Second), 20)}, nil
}

// Name is the channel's name (its callback route's).
func (s *Slack) Name() string { return s.opts.Name }

// Routes applies the channel's route.
func (s *Slack) Routes(v View) bool { return s.opts.Route.Match(v) }

// slackRef is the message a request was posted as.
type slackRef struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// Post sends chat.postMessage.
func (s *Slack) Post(ctx context.Context, v View) (string, error) {
	return s.postMessage(ctx, slackText(v), s.blocks(v))
}

// Resolved sends chat.update: the message without its buttons, saying how
// the request ended.
func (s *Slack) Resolved(ctx context.Context, ref string, v View) error {
	return s.updateMessage(ctx, ref, slackText(v), s.blocks(v))
}

// postMessage sends chat.postMessage with text and blocks to the
// channel's conversation and returns the message's reference (slackRef as
// JSON) for updateMessage. Held requests and proposals post through it, so
// both are sent and referenced alike.
func (s *Slack) postMessage(ctx context.Context, text string, blocks []any) (string, error) {
	var out slackRef
	err := s.call(ctx, "chat.postMessage", map[string]any{
		"channel": s.opts.Channel, "text": text, "blocks": blocks,
		"unfurl_links": false, "unfurl_media": false,
	}, &out)
	if err != nil {
		return "", err
	}
	if out.TS == "" {
		return "", errors.New("chat.postMessage: no ts in the answer")
	}
	if out.Channel == "" {
		out.Channel = s.opts.Channel
	}
	return string(mustJSON(out)), nil
}

// updateMessage sends chat.update, rewriting the message ref (from
// postMessage) with text and blocks. A reference that does not parse is
// permanent: retrying cannot mend it.
func (s *Slack) updateMessage(ctx context.Context, ref, text string, blocks []any) error {
	var r slackRef
	if err := json.Unmarshal([]byte(ref), &r); err != nil {
		return Permanent(fmt.Errorf("bad message reference: %w", err))
	}
	return s.call(ctx, "chat.update", map[string]any{
		"channel": r.Channel, "ts": r.TS, "text": text, "blocks": blocks,
	}, nil)
}

// slackAPIResponse is every Web API answer's envelope.
type slackAPIResponse struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error"`
	Warning string `json:"warning"`
}

// slackTransient are the error codes worth retrying; every other one (a
// bad token, a missing channel, a malformed message) is permanent.
var slackTransient = []string{"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}

// call makes one Web API call. out, if not nil, receives the answer's
// fields besides ok and error. The token goes in the Authorization header
// only, and errors never quote it.
func (s *Slack) call(ctx context.Context, method string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return Permanent(err)
	}
	actx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, s.api+"/"+method, bytes.NewReader(b))
	if err != nil {
		return Permanent(fmt.Errorf("%s: cannot build the request", method))
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+string(s.opts.BotToken))
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s: %w", method, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s: read the answer: %w", method, err)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return &RetryAfterError{Err: fmt.Errorf("%s: rate limited", method), After: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	case resp.StatusCode >= 500:
		return fmt.Errorf("%s: HTTP %s", method, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return Permanent(fmt.Errorf("%s: HTTP %s", method, resp.Status))
	}
	var env slackAPIResponse
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s: the answer is not JSON", method)
	}
	if !env.OK {
		err := fmt.Errorf("%s: %s", method, env.Error)
		if slices.Contains(slackTransient, env.Error) {
			return err
		}
		return Permanent(err)
	}
	if env.Warning != "" {
		s.log.Debug("slack warning", "method", method, "warning", env.Warning)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
	}
	return nil
}

// ---- the message -----------------------------------------------------------

// slackText is the message's plain-text fallback (notifications, screen
// readers).
func slackText(v View) string {
	what := "run"
	if v.Kind == KindEgress {
		what = "network request to " + v.Target
	}
	if v.Status == StatusPending {
		return fmt.Sprintf("%s %s in session %s (tenant %s) is waiting for approval", v.RiskLevel, what, v.SessionID, v.Tenant)
	}
	return fmt.Sprintf("%s %s in session %s (tenant %s): %s", v.RiskLevel, what, v.SessionID, v.Tenant, outcomeText(v))
}

// outcomeText says how a request ended.
func outcomeText(v View) string {
	switch v.Status {
	case StatusApproved:
		if v.Scope == ScopeSession {
			return "approved for the session by " + v.DecidedBy
		}
		if v.Scope == ScopePattern {
			return "approved for the pattern in the tenant by " + v.DecidedBy
		}
		return "approved by " + v.DecidedBy
	case StatusDenied:
		return "denied by " + v.DecidedBy
	case StatusTimeout:
		return "timed out (denied): nobody decided in time"
	case StatusWithdrawn:
		return "withdrawn: the agent stopped waiting"
	case StatusInterrupted:
		return "interrupted (denied): " + v.Reason
	}
	return v.Status
}

var mrkdwnReplacer = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// mrkdwnEscape escapes the three characters Slack's mrkdwn reserves.
func mrkdwnEscape(s string) string { return mrkdwnReplacer.Replace(s) }

// escapeClip is mrkdwnEscape(s) cut to at most n bytes, never inside an
// escape or a rune, marking a cut.
func escapeClip(s string, n int) string {
	var b strings.Builder
	for i, r := range s {
		e := mrkdwnEscape(string(r))
		if b.Len()+len(e) > n-len("…") {
			if i < len(s) {
				b.WriteString("…")
			}
			break
		}
		b.WriteString(e)
	}
	return b.String()
}

// clip cuts s to n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n] + "…"
}

func mrkdwn(text string) map[string]any { return map[string]any{"type": "mrkdwn", "text": text} }

func plain(text string) map[string]any {
	return map[string]any{"type": "plain_text", "text": text, "emoji": false}
}

// blocks is the Block Kit message of v: what the page shows of a request
// (session context, the code's first lines, the risk patterns, the
// policy's reasons), with Approve and Deny while it is pending and the
// outcome once it is not. Texts are within Block Kit's limits (header 150,
// section text 3000, field 2000 characters).
func (s *Slack) blocks(v View) []any {
	title := v.RiskLevel + "-risk run waiting for approval"
	if v.Kind == KindEgress {
		title = "Network request waiting for approval"
	}
	if v.Status != StatusPending {
		title = clip(strings.ToUpper(outcomeText(v)[:1])+outcomeText(v)[1:], 140)
	}
	var fields []any
	add := func(k, val string) {
		if val != "" {
			fields = append(fields, mrkdwn("*"+k+"*\n"+mrkdwnEscape(clip(val, 500))))
		}
	}
	add("Tenant", v.Tenant)
	add("Session", v.SessionID)
	add("Agent", v.Principal)
	add("Via", v.Via)
	if v.Kind == KindEgress {
		add("Wants", v.Target)
	} else {
		add("Language", v.Language)
	}
	add("Executor", v.Executor)
	add("Risk", v.RiskLevel)
	if v.Status == StatusPending {
		fields = append(fields, mrkdwn(fmt.Sprintf("*Deadline*\n<!date^%d^{time_secs}|%s>", v.Deadline.Unix(), v.Deadline.UTC().Format(time.RFC3339))))
	}
	out := []any{
		map[string]any{"type": "header", "text": plain(clip(title, 140))},
		map[string]any{"type": "section", "fields": fields[:min(len(fields), 10)]},
	}
	if v.Kind != KindEgress && v.Code != "" {
		ex, cut := Excerpt(v.Code)
		ex = strings.ReplaceAll(ex, "```", "`\u200b``")
		text := "```" + escapeClip(ex, 2800) + "```"
		if cut {
			text += "\n_first lines only: the page shows the whole code_"
		}
		out = append(out, map[string]any{"type": "section", "text": mrkdwn(text)})
	}
	var lines []string
	for _, p := range v.Patterns {
		l := "• "
		if p.Line > 0 {
			l += "line " + strconv.Itoa(p.Line) + ": "
		}
		lines = append(lines, l+mrkdwnEscape(p.Message)+" (`"+mrkdwnEscape(p.ID)+"`)")
	}
	if len(lines) > 0 {
		out = append(out, map[string]any{"type": "section", "text": mrkdwn(clip("*Risk patterns*\n"+strings.Join(lines, "\n"), 2900))})
	}
	lines = lines[:0]
	for _, r := range v.Reasons {
		lines = append(lines, "• "+mrkdwnEscape(r.Message))
	}
	if len(lines) > 0 {
		out = append(out, map[string]any{"type": "section", "text": mrkdwn(clip("*Policy*\n"+strings.Join(lines, "\n"), 2900))})
	}
	ctx := "approval `" + v.ID + "` · digest `" + clip(v.Digest, 23) + "`"
	if link := PageLink(s.opts.PageURL, v.ID); link != "" {
		ctx += " · <" + link + "|open in the approval page>"
	}
	out = append(out, map[string]any{"type": "context", "elements": []any{mrkdwn(ctx)}})
	if v.Status == StatusPending {
		value := v.ID + " " + v.Digest // bound to the digest the approver saw
		buttons := []any{map[string]any{"type": "button", "action_id": slackApprove, "text": plain("Approve"), "style": "primary", "value": value}}
		if v.Kind == KindEgress {
			buttons = append(buttons, map[string]any{"type": "button", "action_id": slackApproveSession, "text": plain("Allow for this session"), "value": value})
			if req, ok := parseEgressTarget(v.Target); ok && s.opts.Grants {
				buttons = append(buttons, map[string]any{"type": "button", "action_id": slackApproveGrant,
					"text": plain(clip(req.method+" under "+req.path+", this session, 30 min", 75)), "value": value})
			}
		} else if s.opts.Grants {
			buttons = append(buttons,
				map[string]any{"type": "button", "action_id": slackApproveSession, "text": plain("Approve for this session, 30 min"), "value": value},
				map[string]any{"type": "button", "action_id": slackApprovePattern, "text": plain("This pattern in this tenant, 8 h"), "value": value})
		}
		buttons = append(buttons, map[string]any{"type": "button", "action_id": slackDeny, "text": plain("Deny"), "style": "danger", "value": value})
		out = append(out, map[string]any{"type": "actions", "block_id": slackActionsBlock, "elements": buttons})
	}
	return out
}

// ---- interactivity ----------------------------------------------------------

// SlackInteraction is the part of a block_actions payload the channel
// reads.
type SlackInteraction struct {
	Type string `json:"type"`
	User struct {
		ID       string `json:"id"`
		Username string `json:"username"`
		TeamID   string `json:"team_id"`
	} `json:"user"`
	Team struct {
		ID string `json:"id"`
	} `json:"team"`
	Container struct {
		Type      string `json:"type"`
		MessageTS string `json:"message_ts"`
		ChannelID string `json:"channel_id"`
	} `json:"container"`
	Actions []struct {
		ActionID string `json:"action_id"`
		BlockID  string `json:"block_id"`
		Value    string `json:"value"`
		Type     string `json:"type"`
	} `json:"actions"`
}

// Callback refusals: each is answered with its status and audited.
var (
	ErrSlackSignature = errcode.New(errcode.Unauthorized, "the request is not signed with the channel's signing secret")
	ErrSlackStale     = errcode.New(errcode.Unauthorized, "the request's timestamp is more than five minutes from now")
	ErrSlackPayload   = errcode.New(errcode.InvalidRequest, "the request is not a block_actions payload of a sandgate message")
	ErrSlackUser      = errcode.New(errcode.Forbidden, "this Slack user is not mapped to an approver")
	ErrSlackTeam      = errcode.New(errcode.Forbidden, "this Slack workspace is not the channel's")
)

// SlackSignature is X-Slack-Signature for body sent at timestamp ts:
// "v0=" and the hex HMAC-SHA256 of "v0:{ts}:{body}".
func SlackSignature(secret []byte, ts string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("v0:" + ts + ":"))
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// verify checks Slack's signature, then the five-minute window.
func (s *Slack) verify(h http.Header, body []byte, now time.Time) error {
	ts, sig := h.Get("X-Slack-Request-Timestamp"), h.Get("X-Slack-Signature")
	if ts == "" || sig == "" {
		return ErrSlackSignature
	}
	want := SlackSignature([]byte(s.opts.SigningSecret), ts, body)
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return ErrSlackSignature
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrSlackSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > SlackMaxSkew || d < -SlackMaxSkew {
		return ErrSlackStale
	}
	return nil
}

// ServeCallback takes one interactivity request: verified by Slack's
// signature scheme, from a mapped user, a click on one of the channel's
// buttons. The decision goes through hub.Decide, bound to the digest the
// message showed; the message itself is rewritten by the channel's
// delivery once the request is resolved. Every callback is audited, a
// refused one with why (unverified ones at a bounded rate: anyone can
// send them).
//
// A click on a request already decided (a double click, a replay within
// the window) changes nothing: it is refused in the audit and answered
// 200, so Slack shows no error; the message already says, or will say,
// how the request ended.
func (s *Slack) ServeCallback(w http.ResponseWriter, r *http.Request, hub *Hub) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSlackCallback+1))
	if err != nil || len(body) > maxSlackCallback {
		return errcode.New(errcode.PayloadTooLarge, "the request is too large")
	}
	rec := &audit.Record{RequestID: w.Header().Get("X-Request-Id"), Kind: "approval.callback", Detail: map[string]string{
		"channel": s.opts.Name, "channel_type": "slack"}}
	if err := s.verify(r.Header, body, time.Now()); err != nil {
		if s.refusals.Allow() {
			s.refuse(r.Context(), rec, err)
		}
		s.log.Info("slack callback refused", "err", err)
		return err
	}
	var in SlackInteraction
	form, perr := url.ParseQuery(string(body))
	if perr == nil && json.Unmarshal([]byte(form.Get("payload")), &in) == nil && in.Type == "block_actions" && isProposalClick(in) {
		return s.serveProposalClick(w, r, hub, in, rec, cmp.Or(in.Team.ID, in.User.TeamID)) // channel_slack_proposals.go
	}
	if perr != nil || json.Unmarshal([]byte(form.Get("payload")), &in) != nil || in.Type != "block_actions" || len(in.Actions) != 1 ||
		in.Actions[0].BlockID != slackActionsBlock || !slices.Contains([]string{slackApprove, slackApproveSession, slackApprovePattern, slackApproveGrant, slackDeny}, in.Actions[0].ActionID) {
		s.refuse(r.Context(), rec, ErrSlackPayload)
		return ErrSlackPayload
	}
	act := in.Actions[0]
	id, digest, _ := strings.Cut(act.Value, " ")
	team := cmp.Or(in.Team.ID, in.User.TeamID)
	rec.Detail["slack_user"], rec.Detail["slack_team"], rec.Detail["action"] = in.User.ID, team, act.ActionID
	rec.Approval = &audit.Approval{ID: id}
	rec.Principal = "slack:" + in.User.ID
	if v, err := hub.Get(r.Context(), id); err == nil {
		rec.Tenant, rec.SessionID = v.Tenant, v.SessionID
	}
	who, err := s.clicker(r.Context(), rec, in, team, "approval_id", id)
	if err != nil {
		return err
	}
	d := Decision{Decision: act.ActionID, Digest: digest}
	if act.ActionID == slackApproveSession || act.ActionID == slackApprovePattern {
		d.Decision, d.Scope = "approve", ScopeSession
		if act.ActionID == slackApprovePattern {
			d.Scope = ScopePattern
		}
		if p, err := hub.Get(r.Context(), id); err == nil && p.Kind != KindEgress {
			d.ForS = int(GrantFor(d.Scope) / time.Second)
		}
	}
	if act.ActionID == slackApproveGrant {
		// The held path and beneath; the page lets the approver shorten it.
		d.Decision, d.Scope, d.ForS = "approve", ScopeSession, int(SessionGrantFor/time.Second)
	}
	v, err := hub.Decide(r.Context(), id, s.opts.Route.Approver(who), d)
	var ce *ConflictError
	switch {
	case errors.As(err, &ce):
		rec.Approval = &audit.Approval{ID: id, Status: ce.Approval.Status, DecidedBy: ce.Approval.DecidedBy}
		s.refuse(r.Context(), rec, err)
		w.WriteHeader(http.StatusOK)
		return nil
	case err != nil:
		s.refuse(r.Context(), rec, err)
		return err
	}
	rec.Outcome = audit.OutcomeOK
	rec.Approval = &audit.Approval{ID: v.ID, Status: v.Status, DecidedBy: v.DecidedBy, TimeToDecideMS: v.TimeToDecideMS}
	s.append(r.Context(), rec)
	s.log.Info("approval decided in slack", "approval_id", v.ID, "status", v.Status, "decided_by", who, "slack_user", in.User.ID)
	w.WriteHeader(http.StatusOK)
	return nil
}

// clicker is the approver principal of a click: a click from another
// workspace than the channel's, or from a Slack user the configuration
// does not map, is refused and audited (what is clicked, idKey: id, is
// in the log line).
func (s *Slack) clicker(ctx context.Context, rec *audit.Record, in SlackInteraction, team, idKey, id string) (string, error) {
	if s.opts.TeamID != "" && team != s.opts.TeamID {
		s.refuse(ctx, rec, ErrSlackTeam)
		return "", ErrSlackTeam
	}
	who, ok := s.opts.Users[in.User.ID]
	if !ok || who == "" {
		s.refuse(ctx, rec, ErrSlackUser)
		s.log.Warn("slack click from an unmapped user refused", "slack_user", in.User.ID, idKey, id)
		return "", ErrSlackUser
	}
	rec.Principal = who
	return who, nil
}

// refuse audits a refused callback.
func (s *Slack) refuse(ctx context.Context, rec *audit.Record, err error) {
	code, status, _ := errcode.Of(err)
	rec.Outcome, rec.ErrorCode, rec.HTTPStatus = audit.OutcomeDenied, string(code), status
	if ce := (*ConflictError)(nil); errors.As(err, &ce) || errors.Is(err, ErrProposalDecided) {
		rec.HTTPStatus = http.StatusOK // answered 200: Slack shows no error
	}
	rec.Detail["refusal"] = err.Error()
	s.append(ctx, rec)
}

func (s *Slack) append(ctx context.Context, rec *audit.Record) {
	if s.opts.Audit == nil {
		return
	}
	if err := s.opts.Audit.Append(context.WithoutCancel(ctx), rec); err != nil {
		s.log.Error("slack callback not audited", "err", err)
	}
}

// Interface guards.
var _ CallbackChannel = (*Slack)(nil)
