package confirm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/events"
)

// DefaultChannelTimeout bounds one request a channel makes.
const DefaultChannelTimeout = 10 * time.Second

// Webhook channel event types.
const (
	WebhookApprovalRequested = "approval.requested"
	WebhookApprovalResolved  = "approval.resolved"
)

// WebhookOptions configures a webhook channel.
type WebhookOptions struct {
	Name  string
	Route Route
	// URL receives the POSTs. It may carry credentials; they are never
	// logged.
	URL string
	// Secret is the Standard Webhooks signing secret (whsec_...).
	Secret string
	// PageURL is the approval page's base URL (https://gate.example.com):
	// each request carries a link to it that opens the request. The
	// approver still authenticates on the page.
	PageURL string
	// Client sends the requests (redirects are never followed); nil is a
	// client of its own. Timeout bounds each request: default
	// DefaultChannelTimeout.
	Client  *http.Client
	Timeout time.Duration
}

// Webhook is a channel that POSTs each held request, and then its
// outcome, to a URL, signed as Standard Webhooks specifies (webhook-id,
// webhook-timestamp, webhook-signature), with a link back to the approval
// page. It carries no decision itself: the link does, through the page.
type Webhook struct {
	opts   WebhookOptions
	key    []byte
	client *http.Client
}

// NewWebhook checks opts and returns the channel.
func NewWebhook(opts WebhookOptions) (*Webhook, error) {
	key, err := events.ParseSecret(opts.Secret)
	if err != nil {
		return nil, fmt.Errorf("webhook channel %s: secret: %w", opts.Name, err)
	}
	if u, err := url.Parse(opts.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("webhook channel %s: url %q: want an http or https URL", opts.Name, events.RedactURL(opts.URL))
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultChannelTimeout
	}
	c := &http.Client{Transport: http.DefaultTransport}
	if opts.Client != nil {
		*c = *opts.Client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Webhook{opts: opts, key: key, client: c}, nil
}

// Name is the channel's name.
func (w *Webhook) Name() string { return w.opts.Name }

// Routes applies the channel's route.
func (w *Webhook) Routes(v View) bool { return w.opts.Route.Match(v) }

// WebhookPayload is the body of a webhook channel's request, in the shape
// Standard Webhooks recommends (type, timestamp, data).
type WebhookPayload struct {
	Type      string      `json:"type"`
	Timestamp time.Time   `json:"timestamp"`
	Data      WebhookData `json:"data"`
}

// WebhookData describes one approval: what the page shows of it, with an
// excerpt of the code instead of the code.
type WebhookData struct {
	Approval ChannelView `json:"approval"`
	// DecisionURL opens the request on the approval page.
	DecisionURL string `json:"decision_url"`
}

// ChannelView is an approval as channels outside the gateway see it: the
// page's fields, with CodeExcerpt (the first lines) in place of the code.
type ChannelView struct {
	ID             string          `json:"id"`
	Kind           string          `json:"kind"`
	Target         string          `json:"target,omitempty"`
	RequestID      string          `json:"request_id"`
	Tenant         string          `json:"tenant"`
	SessionID      string          `json:"session_id"`
	Principal      string          `json:"principal"`
	Via            string          `json:"via,omitempty"`
	Language       string          `json:"language"`
	CodeExcerpt    string          `json:"code_excerpt,omitempty"`
	CodeTruncated  bool            `json:"code_truncated,omitempty"`
	CodeSHA256     string          `json:"code_sha256"`
	Digest         string          `json:"digest"`
	RiskLevel      string          `json:"risk_level"`
	Patterns       []Pattern       `json:"patterns"`
	Reasons        []Reason        `json:"reasons"`
	Executor       string          `json:"executor"`
	PolicyRevision string          `json:"policy_revision"`
	Context        map[string]bool `json:"context,omitempty"`
	Status         string          `json:"status"`
	Scope          string          `json:"scope,omitempty"`
	RequestedAt    time.Time       `json:"requested_at"`
	Deadline       time.Time       `json:"deadline"`
	DecidedBy      string          `json:"decided_by,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	DecidedAt      time.Time       `json:"decided_at,omitzero"`
}

// NewChannelView is v as a channel shows it.
func NewChannelView(v View) ChannelView {
	ex, cut := Excerpt(v.Code)
	return ChannelView{
		ID: v.ID, Kind: v.Kind, Target: v.Target, RequestID: v.RequestID, Tenant: v.Tenant, SessionID: v.SessionID,
		Principal: v.Principal, Via: v.Via, Language: v.Language, CodeExcerpt: ex, CodeTruncated: cut,
		CodeSHA256: v.CodeSHA256, Digest: v.Digest, RiskLevel: v.RiskLevel, Patterns: nonNil(v.Patterns), Reasons: nonNil(v.Reasons),
		Executor: v.Executor, PolicyRevision: v.PolicyRevision, Context: v.Context, Status: v.Status, Scope: v.Scope,
		RequestedAt: v.RequestedAt, Deadline: v.Deadline, DecidedBy: v.DecidedBy, Reason: v.Reason, DecidedAt: v.DecidedAt,
	}
}

// PageLink is the approval page's link to approval id under base: the
// fragment names the request (it never reaches a server or a log), and the
// page selects it once its socket is up.
func PageLink(base, id string) string {
	if base == "" {
		return ""
	}
	return strings.TrimRight(base, "/") + "/#approval=" + url.QueryEscape(id)
}

// Post sends approval.requested.
func (w *Webhook) Post(ctx context.Context, v View) (string, error) {
	return "", w.send(ctx, WebhookApprovalRequested, v)
}

// Resolved sends approval.resolved.
func (w *Webhook) Resolved(ctx context.Context, _ string, v View) error {
	return w.send(ctx, WebhookApprovalResolved, v)
}

// send makes one attempt. The webhook-id is the approval's id and the
// type, the same across retries, so a receiver can drop duplicates.
func (w *Webhook) send(ctx context.Context, typ string, v View) error {
	body, err := json.Marshal(WebhookPayload{Type: typ, Timestamp: time.Now().UTC(),
		Data: WebhookData{Approval: NewChannelView(v), DecisionURL: PageLink(w.opts.PageURL, v.ID)}})
	if err != nil {
		return Permanent(err)
	}
	return w.deliver(ctx, v.ID+"."+strings.TrimPrefix(typ, "approval."), body)
}

// deliver makes one signed attempt at POSTing body as message id.
func (w *Webhook) deliver(ctx context.Context, id string, body []byte) error {
	actx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, w.opts.URL, bytes.NewReader(body))
	if err != nil {
		return Permanent(errors.New("cannot build the request"))
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandgate-approvals")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", events.Sign(w.key, id, ts, body))
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // *url.Error quotes the URL, credentials and all
		}
		return fmt.Errorf("%s: %w", events.RedactURL(w.opts.URL), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	err = fmt.Errorf("%s: HTTP %s", events.RedactURL(w.opts.URL), resp.Status)
	if d := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); d > 0 {
		return &RetryAfterError{Err: err, After: d}
	}
	return err
}

// Interface guards.
var _ Channel = (*Webhook)(nil)
