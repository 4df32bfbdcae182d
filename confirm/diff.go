package confirm

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Bounds of a file diff shown to an approver.
const (
	// MaxDiffInput is the largest file (before or after) that is diffed;
	// a larger one says "too large". The caller reads at most one byte
	// more.
	MaxDiffInput = 64 << 10
	// MaxDiffBytes bounds the diff's text; a longer one is cut at a line.
	MaxDiffBytes = 4 << 10
	// maxDiffCells bounds the line-matching work (lines before × lines
	// after, once the common start and end are set aside); past it the
	// changed middle is shown as removed and added whole.
	maxDiffCells = 250_000
	diffContext  = 3
)

// FileDiff is what a write or an edit did to a file, for the page.
type FileDiff struct {
	Path string `json:"path"`
	// Status is created, modified or unchanged.
	Status string `json:"status"`
	// Binary and TooLarge: no text diff (Text is empty).
	Binary   bool `json:"binary,omitempty"`
	TooLarge bool `json:"too_large,omitempty"`
	// Text is a unified diff (3 lines of context), secrets of known
	// shapes redacted, at most MaxDiffBytes (Cut: more was left out).
	Text    string `json:"text,omitempty"`
	Cut     bool   `json:"cut,omitempty"`
	Added   int    `json:"added"`
	Removed int    `json:"removed"`
}

// Diff compares a file's contents before and after a change (existed:
// the file was there before).
func Diff(path string, before, after []byte, existed bool) FileDiff {
	d := FileDiff{Path: path, Status: "modified"}
	if !existed {
		d.Status = "created"
	}
	switch {
	case len(before) > MaxDiffInput || len(after) > MaxDiffInput:
		d.TooLarge = true
		return d
	case isBinary(before) || isBinary(after):
		d.Binary = true
		return d
	case existed && bytes.Equal(before, after):
		d.Status = "unchanged"
		return d
	}
	// Each side is redacted whole before it is diffed: a hunk from the
	// middle of a PEM file has no BEGIN line, so redacting the diff's
	// text would miss the key. A change inside a redacted secret shows as
	// no changed lines.
	a, b := splitLines(Redact(string(before))), splitLines(Redact(string(after)))
	ops := lineOps(a, b)
	for _, o := range ops {
		switch o.kind {
		case '+':
			d.Added++
		case '-':
			d.Removed++
		}
	}
	from := "a/" + strings.TrimPrefix(path, "/")
	if !existed {
		from = "/dev/null"
	}
	d.Text = "--- " + from + "\n+++ b/" + strings.TrimPrefix(path, "/") + "\n" + hunks(ops, 2*MaxDiffBytes)
	if len(d.Text) > MaxDiffBytes {
		cut := strings.LastIndexByte(d.Text[:MaxDiffBytes], '\n')
		if cut < 0 {
			cut = MaxDiffBytes
		}
		d.Text, d.Cut = cutUTF8(d.Text, cut+1), true
	}
	return d
}

// isBinary: a NUL byte or text that is not UTF-8 in the first 8 KiB.
func isBinary(b []byte) bool {
	head := b[:min(len(b), 8<<10)]
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	if len(head) < len(b) { // a character cut at 8 KiB is not a reason
		for i := len(head) - 1; i >= 0 && i >= len(head)-utf8.UTFMax; i-- {
			if utf8.RuneStart(head[i]) {
				if !utf8.FullRune(head[i:]) {
					head = head[:i]
				}
				break
			}
		}
	}
	return !utf8.Valid(head)
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

type lineOp struct {
	kind byte // ' ', '-', '+'
	text string
}

// lineOps is the edit from a to b: the common start and end kept, the
// middle matched by longest common subsequence when it is small enough.
func lineOps(a, b []string) []lineOp {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []lineOp
	for _, l := range a[:pre] {
		ops = append(ops, lineOp{' ', l})
	}
	ops = append(ops, middleOps(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, lineOp{' ', l})
	}
	return ops
}

func middleOps(a, b []string) []lineOp {
	var ops []lineOp
	if len(a)*len(b) > maxDiffCells || len(a) == 0 || len(b) == 0 {
		for _, l := range a {
			ops = append(ops, lineOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, lineOp{'+', l})
		}
		return ops
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	w := len(b) + 1
	lcs := make([]int32, (len(a)+1)*w)
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, lineOp{' ', a[i]})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
			ops = append(ops, lineOp{'-', a[i]}) // removals before additions, as diff(1)
			i++
		default:
			ops = append(ops, lineOp{'+', b[j]})
			j++
		}
	}
	return ops
}

// hunks renders ops as unified-diff hunks with diffContext lines of
// context around each change, stopping after the hunk that passes limit
// bytes (what is shown is cut shorter).
func hunks(ops []lineOp, limit int) string {
	var sb strings.Builder
	n := len(ops)
	for start := 0; start < n && sb.Len() <= limit; {
		first := start
		for first < n && ops[first].kind == ' ' {
			first++
		}
		if first == n {
			break
		}
		lo := max(first-diffContext, start)
		hi, quiet := first, 0 // hi: one past the hunk's last op
		for k := first; k < n; k++ {
			if ops[k].kind == ' ' {
				quiet++
				if quiet > 2*diffContext {
					break
				}
			} else {
				quiet = 0
				hi = k + 1
			}
		}
		hi = min(hi+diffContext, n)
		aLine, bLine := 1, 1
		for _, o := range ops[:lo] {
			if o.kind != '+' {
				aLine++
			}
			if o.kind != '-' {
				bLine++
			}
		}
		var aN, bN int
		var body strings.Builder
		for _, o := range ops[lo:hi] {
			if o.kind != '+' {
				aN++
			}
			if o.kind != '-' {
				bN++
			}
			body.WriteByte(o.kind)
			body.WriteString(o.text)
			if !strings.HasSuffix(o.text, "\n") {
				body.WriteString("\n\\ No newline at end of file\n")
			}
		}
		if aN == 0 {
			aLine--
		}
		if bN == 0 {
			bLine--
		}
		fmt.Fprintf(&sb, "@@ -%d,%d +%d,%d @@\n", aLine, aN, bLine, bN)
		sb.WriteString(body.String())
		start = hi
	}
	return sb.String()
}
