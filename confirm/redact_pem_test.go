package confirm

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// rsaKeyPEM is a freshly generated RSA private key in PEM (about 1.7 KB),
// and its body lines (what must never reach an approver).
func rsaKeyPEM(t *testing.T) (string, []string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
	var body []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			body = append(body, l)
		}
	}
	return s, body
}

// assertNoKeyMaterial fails when any piece of a key body line (its
// 20-character chunks) shows in text.
func assertNoKeyMaterial(t *testing.T, text string, body []string) {
	t.Helper()
	for _, l := range body {
		for i := 0; i+20 <= len(l); i += 20 {
			if strings.Contains(text, l[i:i+20]) {
				t.Fatalf("key material %q shown in:\n%s", l[i:i+20], text)
			}
		}
	}
}

// A run that prints a key: the excerpt's tail holds the key's end without
// its BEGIN line, and still shows none of it.
func TestExcerptTailOfPrintedKeyRedacted(t *testing.T) {
	key, body := rsaKeyPEM(t)
	if len(key) < 1500 {
		t.Fatalf("key is %d bytes, want a ~1.7 KB key", len(key))
	}
	out := "$ cat id_rsa\n" + key
	if len(out) <= ExcerptHead+ExcerptTail+200 {
		t.Fatalf("output of %d bytes fits an excerpt whole", len(out))
	}
	e := excerptOf(out)
	assertNoKeyMaterial(t, e.Text, body)
	if !strings.Contains(e.Text, Redacted) {
		t.Fatalf("no redaction marker in %q", e.Text)
	}
}

// A one-line edit in the middle of a PEM file: the hunk's context lines
// are key body without the BEGIN line, and still none of it shows.
func TestDiffInsidePEMFileRedacted(t *testing.T) {
	key, body := rsaKeyPEM(t)
	lines := strings.SplitAfter(key, "\n")
	lines = lines[:len(lines)-1] // the empty piece after the last newline
	if len(lines) != 27 {
		t.Fatalf("PEM file has %d lines, want 27", len(lines))
	}
	edited := append([]string(nil), lines...)
	edited[13] = strings.Repeat("A", len(lines[13])-1) + "\n"
	d := Diff("/home/user/.ssh/id_rsa", []byte(key), []byte(strings.Join(edited, "")), true)
	assertNoKeyMaterial(t, d.Text, append(body, strings.TrimSuffix(edited[13], "\n")))
	if d.Status != "modified" {
		t.Fatalf("status %q", d.Status)
	}
}

// Base64 runs are redacted only in text that names a private key: a
// long base64 line elsewhere (a hash, an image) stays for the approver.
func TestPEMBodyRuleNeedsPrivateKey(t *testing.T) {
	line := strings.Repeat("QUJD", 16)
	if got := Redact("sha: " + line + "\n" + line + "\n"); !strings.Contains(got, line) {
		t.Fatalf("base64 without a private key redacted: %q", got)
	}
	got := Redact(line + "\n" + line + "\n-----END PRIVATE KEY-----\n")
	if strings.Contains(got, line) {
		t.Fatalf("key body shown: %q", got)
	}
}
