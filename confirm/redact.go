package confirm

import "regexp"

// Redacted replaces a secret in an excerpt or a diff.
const Redacted = "[redacted]"

// secretShapes are credentials of well-known shapes: what an agent's run
// most often prints or writes by mistake (an environment dump, a .env
// file, a config). The approval page shows an approver excerpts of output
// and diffs of files; a secret in them would reach a person, a browser
// and a screenshot. No such list is complete, which is why the page only
// ever gets short excerpts.
var secretShapes = []*regexp.Regexp{
	regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`),
	regexp.MustCompile(`\b(AKIA|ASIA)[0-9A-Z]{16}\b`),                               // AWS access key id
	regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}\b`),                            // GitHub
	regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{30,}\b`),                          // GitHub fine-grained
	regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}\b`),                         // Slack
	regexp.MustCompile(`\bsk-(ant-|proj-)?[A-Za-z0-9_-]{20,}\b`),                    // OpenAI, Anthropic
	regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}\b`),                                 // Google API key
	regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`), // JWT
	regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{8,}=*`),
	regexp.MustCompile(`(?i)://[^/\s:@]+:[^/\s@]+@`), // credentials in a URL
}

// secretAssignment is NAME=value or "name": "value" where the name says
// secret; the name stays, the value goes.
var secretAssignment = regexp.MustCompile(`(?i)\b([A-Za-z0-9_.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential)[A-Za-z0-9_.-]*["']?\s*[:=]\s*["']?)([^\s"',;]{4,})`)

// Redact replaces the secrets of known shapes in s by [redacted].
func Redact(s string) string {
	for _, re := range secretShapes {
		s = re.ReplaceAllStringFunc(s, func(m string) string {
			if len(m) > 3 && m[0] == ':' && m[1] == '/' { // keep the scheme's "://" and the "@"
				return "://" + Redacted + "@"
			}
			return Redacted
		})
	}
	return secretAssignment.ReplaceAllString(s, "${1}"+Redacted)
}
