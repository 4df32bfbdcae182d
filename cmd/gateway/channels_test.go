package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/confirm"
)

func TestChannelsConfig(t *testing.T) {
	cfg, err := LoadFile("testdata/channels.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a := cfg.Approval
	if len(a.Channels) != 2 || a.Channels[1].Slack.Users["U0ALICE"] != "alice" || a.PageURL != "https://gate.example.com" {
		t.Fatalf("%+v", a)
	}
	env := map[string]string{"SLACK_BOT_TOKEN": "xoxb-secret-token", "SLACK_SIGNING_SECRET": "signing-secret"}
	chs, err := approvalChannels(a, a.PageURL, func(k string) string { return env[k] }, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(chs) != 2 || chs[0].Name() != "ops-hook" || chs[1].Name() != "slack" {
		t.Fatalf("%v", chs)
	}
	if !chs[1].Routes(confirm.View{RiskLevel: "HIGH", Tenant: "x"}) || chs[1].Routes(confirm.View{RiskLevel: "MEDIUM"}) ||
		chs[0].Routes(confirm.View{Tenant: "team-b"}) {
		t.Error("routes not applied")
	}
	if _, err := approvalChannels(a, a.PageURL, noEnv, nil, nil); err == nil || !strings.Contains(err.Error(), "SLACK_BOT_TOKEN") {
		t.Errorf("empty environment: %v", err)
	}
	// Secrets never print with the configuration.
	if s := fmt.Sprintf("%v %+v %#v", a, a, a); strings.Contains(s, "MfKQ9r8") {
		t.Errorf("the configuration prints a secret: %s", s)
	}
}

func TestChannelsConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		ch   ChannelConfig
		want string
	}{
		{"type", ChannelConfig{Name: "x", Type: "teams"}, "want webhook or slack"},
		{"name", ChannelConfig{Name: "Bad Name", Type: "webhook"}, ".name"},
		{"webhook secret", ChannelConfig{Name: "x", Type: "webhook", Webhook: WebhookChannelConfig{URL: "https://h.example"}}, "exactly one of secret"},
		{"webhook url", ChannelConfig{Name: "x", Type: "webhook", Webhook: WebhookChannelConfig{URL: "ftp://h", SecretEnv: "S"}}, "webhook.url"},
		{"risk level", ChannelConfig{Name: "x", Type: "webhook", RiskLevels: []string{"SEVERE"},
			Webhook: WebhookChannelConfig{URL: "https://h.example", SecretEnv: "S"}}, "risk_levels"},
		{"slack channel", ChannelConfig{Name: "x", Type: "slack", Slack: SlackChannelConfig{BotTokenEnv: "A", SigningSecretEnv: "B"}}, "slack.channel"},
		{"slack token", ChannelConfig{Name: "x", Type: "slack", Slack: SlackChannelConfig{Channel: "C1", SigningSecretEnv: "B"}}, "bot_token"},
		{"slack user", ChannelConfig{Name: "x", Type: "slack", Slack: SlackChannelConfig{Channel: "C1", BotTokenEnv: "A", SigningSecretEnv: "B",
			Users: map[string]string{"alice": "alice"}}}, "slack.users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Approval.Channels = []ChannelConfig{tc.ch}
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	c := Default()
	c.Approval.Channels = []ChannelConfig{
		{Name: "x", Type: "webhook", Webhook: WebhookChannelConfig{URL: "https://h.example", SecretEnv: "S"}},
		{Name: "x", Type: "webhook", Webhook: WebhookChannelConfig{URL: "https://h.example", SecretEnv: "S"}},
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("duplicate names: %v", err)
	}
}
