package confirm

import (
	"regexp"
	"strings"
)

// Redacted replaces a secret in an excerpt or a diff.
const Redacted = "[redacted]"

// secretShape is a credential of a well-known shape, and a literal every
// match contains (looked for in the lowercased text first: most text holds
// none, and the literal test is far cheaper than the expression).
type secretShape struct {
	hint string
	re   *regexp.Regexp
}

// secretShapes are what an agent's run most often prints or writes by
// mistake (an environment dump, a .env file, a config). The approval page
// shows an approver excerpts of output and diffs of files; a secret in
// them would reach a person, a browser and a screenshot. No such list is
// complete, which is why the page only ever gets short excerpts.
var secretShapes = []secretShape{
	{"private key-----", regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`)},
	{"akia", regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`)}, // AWS access key id
	{"asia", regexp.MustCompile(`\bASIA[0-9A-Z]{16}\b`)},
	{"_", regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}\b`)}, // GitHub
	{"github_pat_", regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{30,}\b`)},
	{"xox", regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}\b`)},                         // Slack
	{"sk-", regexp.MustCompile(`\bsk-(ant-|proj-)?[A-Za-z0-9_-]{20,}\b`)},                    // OpenAI, Anthropic
	{"aiza", regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}\b`)},                                // Google API key
	{"eyj", regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`)}, // JWT
	{"bearer", regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{8,}=*`)},
}

// urlCredentials are credentials in a URL (scheme://user:password@host):
// the scheme and the host stay.
var urlCredentials = regexp.MustCompile(`://[^/\s:@]+:[^/\s@]+@`)

// secretAssignment is NAME=value or "name": "value" where the name says
// secret; the name stays, the value goes.
var secretAssignment = regexp.MustCompile(`(?i)\b([A-Za-z0-9_.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential)[A-Za-z0-9_.-]*["']?\s*[:=]\s*["']?)([^\s"',;]{4,})`)

var assignmentHints = []string{"pass", "secret", "token", "key", "credential"}

// pemBody is a run of lines of base64 only, each at least 40 characters:
// the body of a PEM key. It is looked for only in text that names a
// private key somewhere, because a piece of text (a diff hunk, the tail
// of a printed key) can hold the body without its BEGIN line.
var pemBody = regexp.MustCompile(`(?m)^[ \t]*[A-Za-z0-9+/=]{40,}[ \t]*\r?$(?:\n[ \t]*[A-Za-z0-9+/=]{40,}[ \t]*\r?$)*`)

// Redact replaces the secrets of known shapes in s by [redacted].
func Redact(s string) string {
	lower := strings.ToLower(s)
	if strings.Contains(s, "PRIVATE KEY-----") {
		s = pemBody.ReplaceAllString(s, Redacted)
	}
	for _, sh := range secretShapes {
		if strings.Contains(lower, sh.hint) {
			s = sh.re.ReplaceAllString(s, Redacted)
		}
	}
	if strings.Contains(s, "://") {
		s = urlCredentials.ReplaceAllString(s, "://"+Redacted+"@")
	}
	for _, h := range assignmentHints {
		if strings.Contains(lower, h) {
			return secretAssignment.ReplaceAllString(s, "${1}"+Redacted)
		}
	}
	return s
}
