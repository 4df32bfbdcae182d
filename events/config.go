package events

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of Config.
const (
	DefaultMaxAge        = 7 * 24 * time.Hour
	DefaultPruneInterval = 10 * time.Minute
	DefaultRetryMin      = 250 * time.Millisecond
	DefaultRetryMax      = 10 * time.Second
	DefaultTimeout       = 15 * time.Second
	DefaultLease         = 15 * time.Second
	DefaultPollInterval  = time.Second
	DefaultKeepalive     = 15 * time.Second
	DefaultWriteTimeout  = 5 * time.Second
)

// Secret sizes Standard Webhooks allows for whsec_ keys (24 to 64 bytes).
const (
	minSecretBytes = 24
	maxSecretBytes = 64
)

// secretPrefix marks a Standard Webhooks symmetric secret.
const secretPrefix = "whsec_"

// Config configures Open. The zero value is valid: no webhooks, the
// defaults above.
type Config struct {
	// Replica names this process among the replicas sharing a
	// PostgreSQL database (storage.replica); it owns webhook leases and
	// is recorded with each delivery. Required on PostgreSQL; on SQLite
	// it defaults to "local".
	Replica string `yaml:"replica" json:"replica,omitempty"`
	// MaxAge is how long events and delivery records are kept.
	MaxAge time.Duration `yaml:"max_age" json:"max_age,omitempty"`
	// PruneInterval is how often old events are removed.
	PruneInterval time.Duration `yaml:"prune_interval" json:"prune_interval,omitempty"`
	// Webhooks are the endpoints events are delivered to.
	Webhooks []Webhook `yaml:"webhooks" json:"webhooks,omitempty"`
	// RetryMin is the wait after a first failed attempt; each further
	// failure doubles it, up to RetryMax.
	RetryMin time.Duration `yaml:"retry_min" json:"retry_min,omitempty"`
	// RetryMax caps the wait between attempts, and so bounds how long
	// after a receiver's return its backlog starts to arrive.
	RetryMax time.Duration `yaml:"retry_max" json:"retry_max,omitempty"`
	// Timeout bounds one delivery attempt (connect, send, response
	// headers).
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Lease is how long a replica's claim to deliver an endpoint lasts
	// without renewal: how soon another replica takes over from one that
	// died.
	Lease time.Duration `yaml:"lease" json:"lease,omitempty"`
	// PollInterval is how often a replica on PostgreSQL reads the log's
	// head, a safety net behind LISTEN/NOTIFY.
	PollInterval time.Duration `yaml:"poll_interval" json:"poll_interval,omitempty"`
	// Keepalive is the interval of SSE comment lines on an idle stream.
	Keepalive time.Duration `yaml:"keepalive" json:"keepalive,omitempty"`
	// WriteTimeout bounds one Publish (and the recording of a delivery
	// attempt).
	WriteTimeout time.Duration `yaml:"write_timeout" json:"write_timeout,omitempty"`
	// Client sends the webhook requests; nil means a client of its own.
	// Redirects are never followed (a 3xx is a failed attempt, as
	// Standard Webhooks says), whatever Client's CheckRedirect.
	Client *http.Client `yaml:"-" json:"-"`
}

// Webhook is one endpoint events are delivered to.
type Webhook struct {
	// Tenant whose events the endpoint gets; "" for every tenant's (an
	// operator's endpoint).
	Tenant string `yaml:"tenant" json:"tenant,omitempty"`
	// URL is an http or https URL. It may carry credentials (userinfo, a
	// query token): they are used for the request but never logged or
	// shown in the delivery log.
	URL string `yaml:"url" json:"url"`
	// Secret is the signing secret in Standard Webhooks form:
	// "whsec_" followed by the base64 of 24 to 64 random bytes.
	Secret string `yaml:"secret" json:"-"`
	// Types, if set, limits the endpoint to these event types; an entry
	// "session.*" matches every type under "session.".
	Types []string `yaml:"types" json:"types,omitempty"`
}

// LogValue keeps the secret and the URL's credentials out of logs.
func (w Webhook) LogValue() slog.Value {
	return slog.GroupValue(slog.String("tenant", w.Tenant), slog.String("url", RedactURL(w.URL)),
		slog.Any("types", w.Types))
}

// String is the webhook without its secret or the URL's credentials.
func (w Webhook) String() string {
	return fmt.Sprintf("webhook{tenant=%q url=%q types=%v}", w.Tenant, RedactURL(w.URL), w.Types)
}

// GoString keeps %#v from printing the secret.
func (w Webhook) GoString() string { return w.String() }

// RedactURL returns u without userinfo, query or fragment: what the
// delivery log and the log lines show of an endpoint. A string that does
// not parse is shown as "<invalid URL>".
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "<invalid URL>"
	}
	p.User = nil
	p.RawQuery, p.ForceQuery = "", false
	p.Fragment, p.RawFragment = "", ""
	return p.String()
}

// withDefaults fills zero durations.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.MaxAge, DefaultMaxAge)
	def(&c.PruneInterval, DefaultPruneInterval)
	def(&c.RetryMin, DefaultRetryMin)
	def(&c.RetryMax, DefaultRetryMax)
	def(&c.Timeout, DefaultTimeout)
	def(&c.Lease, DefaultLease)
	def(&c.PollInterval, DefaultPollInterval)
	def(&c.Keepalive, DefaultKeepalive)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	return c
}

// Validate reports every problem of c at once (errors.Join), each naming
// its field. Zero durations stand for the defaults. Secrets never appear
// in the errors, nor do URLs' credentials.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"max_age", c.MaxAge}, {"prune_interval", c.PruneInterval}, {"retry_min", c.RetryMin},
		{"retry_max", c.RetryMax}, {"timeout", c.Timeout}, {"lease", c.Lease},
		{"poll_interval", c.PollInterval}, {"keepalive", c.Keepalive}, {"write_timeout", c.WriteTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("events.%s: %s is negative", d.name, d.v))
		}
	}
	if d := c.withDefaults(); d.RetryMin > d.RetryMax {
		errs = append(errs, fmt.Errorf("events.retry_min %s is above retry_max %s", d.RetryMin, d.RetryMax))
	}
	seen := make(map[string]int)
	for i, w := range c.Webhooks {
		at := fmt.Sprintf("events.webhooks[%d]", i)
		errs = append(errs, w.validate(at)...)
		if j, dup := seen[endpointID(w.Tenant, w.URL)]; dup {
			errs = append(errs, fmt.Errorf("%s: same tenant and url as webhooks[%d]", at, j))
		} else {
			seen[endpointID(w.Tenant, w.URL)] = i
		}
	}
	return errors.Join(errs...)
}

func (w Webhook) validate(at string) []error {
	var errs []error
	u, err := url.Parse(w.URL)
	switch {
	case w.URL == "":
		errs = append(errs, fmt.Errorf("%s.url: missing", at))
	case err != nil:
		// url.Error quotes the URL, credentials and all: say less.
		errs = append(errs, fmt.Errorf("%s.url: does not parse as a URL", at))
	case u.Scheme != "http" && u.Scheme != "https":
		errs = append(errs, fmt.Errorf("%s.url %q: want an http or https URL", at, RedactURL(w.URL)))
	case u.Host == "":
		errs = append(errs, fmt.Errorf("%s.url %q: no host", at, RedactURL(w.URL)))
	}
	if _, err := decodeSecret(w.Secret); err != nil {
		errs = append(errs, fmt.Errorf("%s.secret: %w", at, err))
	}
	for j, t := range w.Types {
		if !validTypeFilter(t) {
			errs = append(errs, fmt.Errorf("%s.types[%d] %q: want an event type such as session.created, or a prefix such as session.*",
				at, j, truncate(t, 64)))
		}
	}
	return errs
}

// decodeSecret returns the HMAC key of a whsec_ secret. Its errors never
// quote the secret.
func decodeSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, secretPrefix)
	switch {
	case s == "":
		return nil, errors.New("missing (want whsec_ followed by base64)")
	case !ok:
		return nil, errors.New("want whsec_ followed by base64 (Standard Webhooks form)")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("the part after whsec_ is not valid base64")
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, fmt.Errorf("the key is %d bytes, want %d to %d", len(key), minSecretBytes, maxSecretBytes)
	}
	return key, nil
}

func validTypeFilter(t string) bool {
	if p, ok := strings.CutSuffix(t, ".*"); ok {
		return ValidType(p)
	}
	return ValidType(t)
}

// endpointID is the stable key of an endpoint in the database: a digest of
// its tenant and full URL (the full URL, since two endpoints may differ
// only in a query token; a digest, since the URL may hold credentials).
func endpointID(tenant, rawURL string) string {
	h := sha256.Sum256([]byte(tenant + "\x00" + rawURL))
	return hex.EncodeToString(h[:16])
}

// matchType reports whether typ passes filter (empty: every type).
func matchType(filter []string, typ string) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if p, ok := strings.CutSuffix(f, "*"); ok {
			if strings.HasPrefix(typ, p) {
				return true
			}
		} else if f == typ {
			return true
		}
	}
	return false
}
