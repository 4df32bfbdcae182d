package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/events"
	"github.com/sandgate/sandgate/risk"
)

// ChannelConfig is one approval channel (approval.channels): it is told of
// every held request routed to it (tenants, risk_levels) and, for Slack,
// carries decisions back. The page is always a channel and needs no entry.
type ChannelConfig struct {
	// Name identifies the channel in logs and audit records, and names a
	// Slack channel's callback route: /v1/channels/<name>/callback.
	Name string `yaml:"name"`
	// Type is "webhook" or "slack".
	Type string `yaml:"type"`
	// Tenants and RiskLevels route requests to the channel; empty means
	// every tenant, every level.
	Tenants    []string `yaml:"tenants"`
	RiskLevels []string `yaml:"risk_levels"`

	Webhook WebhookChannelConfig `yaml:"webhook"`
	Slack   SlackChannelConfig   `yaml:"slack"`
}

// WebhookChannelConfig is a webhook channel's receiver: signed as Standard
// Webhooks specifies with Secret (whsec_...), or with the value of the
// environment variable SecretEnv.
type WebhookChannelConfig struct {
	URL       string         `yaml:"url"`
	Secret    confirm.Secret `yaml:"secret"`
	SecretEnv string         `yaml:"secret_env"`
}

// SlackChannelConfig is a Slack app channel. Its bot token (xoxb-...) and
// signing secret come from the file or, better, from environment
// variables named by *_env; neither is ever logged.
type SlackChannelConfig struct {
	// Channel is the Slack channel id (C0123ABCD) the app posts to; the
	// app must be a member.
	Channel          string         `yaml:"channel"`
	BotToken         confirm.Secret `yaml:"bot_token"`
	BotTokenEnv      string         `yaml:"bot_token_env"`
	SigningSecret    confirm.Secret `yaml:"signing_secret"`
	SigningSecretEnv string         `yaml:"signing_secret_env"`
	// TeamID, when set, refuses clicks from any other workspace.
	TeamID string `yaml:"team_id"`
	// Users maps Slack user ids to the approver principals they decide
	// as ("U0123ABCD": alice). Anyone else's click is refused and
	// audited.
	Users map[string]string `yaml:"users"`
	// APIURL is the Web API's base; default https://slack.com/api.
	APIURL string `yaml:"api_url"`
}

var (
	channelName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	slackUserID = regexp.MustCompile(`^[UW][A-Z0-9]{2,}$`)
)

// validate reports the problems of approval.channels and approval.page_url.
func (a ApprovalConfig) validateChannels() []error {
	var errs []error
	if u := a.PageURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("approval.page_url %q: want http(s)://host[:port][/path]", u))
		}
	}
	if len(a.Channels) > 0 && a.AutoApprove {
		errs = append(errs, errors.New("approval.channels: auto_approve asks nobody; remove one of them"))
	}
	seen := map[string]bool{}
	for i, c := range a.Channels {
		at := fmt.Sprintf("approval.channels[%d]", i)
		add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(at+format, args...)) }
		if !channelName.MatchString(c.Name) {
			add(".name %q: want lower-case letters, digits, - and _ (at most 63)", c.Name)
		} else if seen[c.Name] {
			add(".name %q: used twice", c.Name)
		}
		seen[c.Name] = true
		for _, l := range c.RiskLevels {
			if _, err := risk.ParseLevel(l); err != nil {
				add(".risk_levels: %v", err)
			}
		}
		switch c.Type {
		case "webhook":
			w := c.Webhook
			if (w.Secret == "") == (w.SecretEnv == "") {
				add(".webhook: exactly one of secret and secret_env is required")
			} else if w.Secret != "" {
				if _, err := events.ParseSecret(string(w.Secret)); err != nil {
					add(".webhook.secret: %v", err)
				}
			}
			if p, err := url.Parse(w.URL); w.URL == "" || err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
				add(".webhook.url %q: want an http or https URL", events.RedactURL(w.URL))
			}
		case "slack":
			s := c.Slack
			if s.Channel == "" {
				add(".slack.channel is required (a channel id such as C0123ABCD)")
			}
			if (s.BotToken == "") == (s.BotTokenEnv == "") {
				add(".slack: exactly one of bot_token and bot_token_env is required")
			}
			if (s.SigningSecret == "") == (s.SigningSecretEnv == "") {
				add(".slack: exactly one of signing_secret and signing_secret_env is required")
			}
			for id, who := range s.Users {
				if !slackUserID.MatchString(id) || strings.TrimSpace(who) == "" {
					add(".slack.users[%s]: want a Slack user id (U0123ABCD) mapped to an approver name", id)
				}
			}
			if s.APIURL != "" {
				if p, err := url.Parse(s.APIURL); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
					add(".slack.api_url %q: want an http or https URL", s.APIURL)
				}
			}
		default:
			add(".type %q: want webhook or slack", c.Type)
		}
	}
	return errs
}

// approvalChannels builds the configured channels. pageURL is the page's
// base for their links; store audits the Slack callbacks.
func approvalChannels(cfg ApprovalConfig, pageURL string, getenv func(string) string, store audit.Store, log *slog.Logger) ([]confirm.Channel, error) {
	secret := func(v confirm.Secret, env, what string) (confirm.Secret, error) {
		if env == "" {
			return v, nil
		}
		if s := getenv(env); s != "" {
			return confirm.Secret(s), nil
		}
		return "", fmt.Errorf("%s: environment variable %s is empty", what, env)
	}
	var out []confirm.Channel
	for _, c := range cfg.Channels {
		route := confirm.Route{Tenants: c.Tenants, RiskLevels: c.RiskLevels}
		switch c.Type {
		case "webhook":
			sec, err := secret(c.Webhook.Secret, c.Webhook.SecretEnv, "approval channel "+c.Name)
			if err != nil {
				return nil, err
			}
			ch, err := confirm.NewWebhook(confirm.WebhookOptions{Name: c.Name, Route: route, URL: c.Webhook.URL, Secret: string(sec), PageURL: pageURL})
			if err != nil {
				return nil, err
			}
			out = append(out, ch)
		case "slack":
			tok, err := secret(c.Slack.BotToken, c.Slack.BotTokenEnv, "approval channel "+c.Name+" bot token")
			if err != nil {
				return nil, err
			}
			sig, err := secret(c.Slack.SigningSecret, c.Slack.SigningSecretEnv, "approval channel "+c.Name+" signing secret")
			if err != nil {
				return nil, err
			}
			ch, err := confirm.NewSlack(confirm.SlackOptions{Name: c.Name, Route: route, APIURL: c.Slack.APIURL, BotToken: tok,
				SigningSecret: sig, Channel: c.Slack.Channel, TeamID: c.Slack.TeamID, Users: c.Slack.Users, PageURL: pageURL,
				Audit: store, Logger: log, Grants: true}) // the hub always has grants (confirmer)
			if err != nil {
				return nil, err
			}
			out = append(out, ch)
		}
	}
	return out, nil
}
