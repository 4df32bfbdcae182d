package confirm

import (
	"fmt"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	big := strings.Repeat("x", MaxDiffInput+1)
	for _, tc := range []struct {
		name          string
		before, after string
		existed       bool
		want          FileDiff // Path, Text ignored here
		text          []string // lines the text must hold, in order
	}{
		{name: "created", after: "one\ntwo\n", want: FileDiff{Status: "created", Added: 2},
			text: []string{"--- /dev/null", "+++ b/workspace/notes.txt", "@@ -0,0 +1,2 @@", "+one", "+two"}},
		{name: "edited line", before: "a\nb\nc\nd\ne\nf\ng\nh\n", after: "a\nb\nc\nd\nE\nf\ng\nh\n", existed: true,
			want: FileDiff{Status: "modified", Added: 1, Removed: 1},
			text: []string{"--- a/workspace/notes.txt", "@@ -2,7 +2,7 @@", " b", "-e", "+E", " h"}},
		{name: "appended no newline", before: "a\n", after: "a\nb", existed: true, want: FileDiff{Status: "modified", Added: 1},
			text: []string{"@@ -1,1 +1,2 @@", " a", "+b", `\ No newline at end of file`}},
		{name: "unchanged", before: "a\n", after: "a\n", existed: true, want: FileDiff{Status: "unchanged"}},
		{name: "binary", before: "a\n", after: "a\x00b", existed: true, want: FileDiff{Status: "modified", Binary: true}},
		{name: "not utf-8", after: "\xff\xfe", want: FileDiff{Status: "created", Binary: true}},
		{name: "too large", before: "a\n", after: big, existed: true, want: FileDiff{Status: "modified", TooLarge: true}},
		{name: "secret redacted", after: "API_KEY=abcd1234efgh\n", want: FileDiff{Status: "created", Added: 1},
			text: []string{"+API_KEY=[redacted]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Diff("/workspace/notes.txt", []byte(tc.before), []byte(tc.after), tc.existed)
			got := d
			got.Path, got.Text = "", ""
			if got != tc.want {
				t.Errorf("diff %+v, want %+v", got, tc.want)
			}
			if (d.Binary || d.TooLarge) && d.Text != "" {
				t.Errorf("text for a file not diffed: %q", d.Text)
			}
			rest := d.Text
			for _, l := range tc.text {
				i := strings.Index(rest, l+"\n")
				if i < 0 {
					t.Fatalf("%q not in order in\n%s", l, d.Text)
				}
				rest = rest[i+len(l):]
			}
			if strings.Contains(d.Text, "abcd1234efgh") {
				t.Errorf("secret in the diff: %s", d.Text)
			}
		})
	}
}

func TestDiffIsBounded(t *testing.T) {
	var before, after strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&before, "line %d\n", i)
		fmt.Fprintf(&after, "line %d changed\n", i)
	}
	d := Diff("f", []byte(before.String()), []byte(after.String()), true)
	if !d.Cut || len(d.Text) > MaxDiffBytes || !strings.HasSuffix(d.Text, "\n") {
		t.Fatalf("cut %v, %d bytes", d.Cut, len(d.Text))
	}
	if d.Added != 3000 || d.Removed != 3000 {
		t.Errorf("+%d -%d", d.Added, d.Removed)
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, keep, gone string }{
		{"key AKIAABCDEFGHIJKLMNOP here", "key [redacted] here", "AKIAABCDEFGHIJKLMNOP"},
		{"GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789", "GITHUB_TOKEN=[redacted]", "ghp_"},
		{`{"password": "hunter22"}`, `"password": "[redacted]"`, "hunter22"},
		{"Authorization: Bearer abc.def.ghi-jkl", "Authorization: [redacted]", "abc.def"},
		{"postgres://app:s3cret@db:5432/x", "postgres://[redacted]@db:5432/x", "s3cret"},
		{"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "[redacted]", "MIIE"},
		{"sk-ant-api03-abcdefghijklmnopqrstuvwx", "[redacted]", "abcdefghijklmnop"},
		{"hello world 42", "hello world 42", "\x00"},
	} {
		got := Redact(tc.in)
		if !strings.Contains(got, tc.keep) || strings.Contains(got, tc.gone) {
			t.Errorf("Redact(%q) = %q", tc.in, got)
		}
	}
}

func TestActivityExcerptsAndBounds(t *testing.T) {
	a := NewActivity()
	long := "START " + strings.Repeat("é", 2000) + " token=supersecretvalue END"
	a.RunFinished("t", "s", "req1", long, "", false)
	e := a.Session("t", "s")["req1"]
	if e.Output == nil || e.Output.Stdout == nil || e.Output.Stderr != nil {
		t.Fatalf("entry %+v", e)
	}
	x := e.Output.Stdout
	if !x.Cut || x.Bytes != len(long) || !strings.HasPrefix(x.Text, "START ") || !strings.HasSuffix(x.Text, "token=[redacted] END") ||
		len(x.Text) > ExcerptHead+ExcerptTail+len(" … ") || strings.Contains(x.Text, "supersecret") || !strings.Contains(x.Text, " … ") {
		t.Errorf("excerpt %q (%d bytes)", x.Text, len(x.Text))
	}
	if !strings.HasPrefix(x.Text, "START ") || strings.ContainsRune(x.Text, '\uFFFD') {
		t.Errorf("a character was cut: %q", x.Text)
	}
	for i := range ActivityPerSession + 5 {
		a.RunFinished("t", "s", fmt.Sprint("r", i), "x", "", false)
	}
	got := a.Session("t", "s")
	if len(got) != ActivityPerSession || got["req1"].Output != nil || got["r0"].Output != nil || got[fmt.Sprint("r", ActivityPerSession+4)].Output == nil {
		t.Errorf("ring keeps %d entries", len(got))
	}
	for i := range ActivitySessions + 1 {
		a.RunFinished("t", fmt.Sprint("s", i), "r", "x", "", false)
	}
	if len(a.Session("t", "s")) != 0 || len(a.Session("t", "s1")) != 1 {
		t.Errorf("the least recent session was not dropped")
	}
	a.Forget("t", "s1")
	if len(a.Session("t", "s1")) != 0 || len(a.Session("t", "other")) != 0 {
		t.Errorf("forgotten session kept")
	}
}
