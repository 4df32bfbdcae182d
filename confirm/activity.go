package confirm

import (
	"container/list"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Activity keeps what the approval page's timeline shows beside the audit
// records (issue 31, "context for the decision"): a short output excerpt
// of each recent run and a bounded diff of each file the files API wrote
// or edited, per session, joined to the session's audit records by
// request id.
//
// Why a bounded in-memory ring and not the chained audit log: the audit
// record deliberately keeps no program output and no file contents (only
// digests and sizes), it is kept for a long retention, exported and
// chained (a row can never be dropped), and output or a file may carry a
// secret the agent printed. An excerpt is needed only while a person may
// still be deciding about the session, so it lives in memory, redacted
// (Redact), cut to a few hundred bytes, and goes with the session
// (Forget), at most ActivityPerSession entries per session and
// ActivitySessions sessions (least recently active dropped first), and
// never after a restart. In a fleet the replica serving a session keeps
// its ring, and the context request is served there (api).
type Activity struct {
	mu       sync.Mutex
	sessions map[string]*list.Element // tenant/session -> element of lru (*activitySession)
	lru      *list.List               // front: most recently active
	max      int
	per      int
}

// Bounds of the activity ring.
const (
	ActivitySessions   = 512
	ActivityPerSession = 32
	// ExcerptHead and ExcerptTail are how much of the start and the end
	// of each output stream an excerpt keeps.
	ExcerptHead = 300
	ExcerptTail = 300
)

// OutputExcerpt is a bounded, redacted piece of a run's output stream.
type OutputExcerpt struct {
	// Text is the stream's start and, when it was longer, " … " and its
	// end; secrets of known shapes are replaced by [redacted].
	Text string `json:"text"`
	// Bytes is the whole stream's size; Cut says Text leaves part out.
	Bytes int  `json:"bytes"`
	Cut   bool `json:"cut,omitempty"`
}

// RunOutput is what a run printed, as excerpts.
type RunOutput struct {
	Stdout *OutputExcerpt `json:"stdout,omitempty"`
	Stderr *OutputExcerpt `json:"stderr,omitempty"`
	// Truncated: the run's output was already cut at its limit.
	Truncated bool `json:"truncated,omitempty"`
}

// ActivityEntry is one request's addition to the timeline.
type ActivityEntry struct {
	RequestID string     `json:"-"`
	Time      time.Time  `json:"-"`
	Output    *RunOutput `json:"output,omitempty"`
	Diff      *FileDiff  `json:"diff,omitempty"`
}

type activitySession struct {
	key     string
	entries []ActivityEntry // oldest first, at most per
}

// NewActivity returns an empty ring with the default bounds.
func NewActivity() *Activity {
	return &Activity{sessions: map[string]*list.Element{}, lru: list.New(), max: ActivitySessions, per: ActivityPerSession}
}

func activityKey(tenant, sessionID string) string { return tenant + "/" + sessionID }

// RunFinished keeps the excerpt of a finished run's output.
func (a *Activity) RunFinished(tenant, sessionID, requestID, stdout, stderr string, truncated bool) {
	if a == nil || requestID == "" {
		return
	}
	out := &RunOutput{Stdout: excerptOf(stdout), Stderr: excerptOf(stderr), Truncated: truncated}
	a.add(tenant, sessionID, ActivityEntry{RequestID: requestID, Time: time.Now(), Output: out})
}

// FileChanged keeps the diff of a file the files API wrote or edited:
// before and after are the file's contents (nil: it did not exist),
// each read up to MaxDiffInput+1 bytes (more: too large to diff).
func (a *Activity) FileChanged(tenant, sessionID, requestID, path string, before, after []byte, existed bool) {
	if a == nil || requestID == "" {
		return
	}
	d := Diff(path, before, after, existed)
	a.add(tenant, sessionID, ActivityEntry{RequestID: requestID, Time: time.Now(), Diff: &d})
}

func (a *Activity) add(tenant, sessionID string, e ActivityEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := activityKey(tenant, sessionID)
	el, ok := a.sessions[k]
	if !ok {
		el = a.lru.PushFront(&activitySession{key: k})
		a.sessions[k] = el
		for a.lru.Len() > a.max {
			old := a.lru.Back()
			a.lru.Remove(old)
			delete(a.sessions, old.Value.(*activitySession).key)
		}
	}
	a.lru.MoveToFront(el)
	s := el.Value.(*activitySession)
	s.entries = append(s.entries, e)
	if over := len(s.entries) - a.per; over > 0 {
		s.entries = append(s.entries[:0:0], s.entries[over:]...)
	}
}

// Session returns the session's entries by request id.
func (a *Activity) Session(tenant, sessionID string) map[string]ActivityEntry {
	out := map[string]ActivityEntry{}
	if a == nil {
		return out
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if el, ok := a.sessions[activityKey(tenant, sessionID)]; ok {
		for _, e := range el.Value.(*activitySession).entries {
			out[e.RequestID] = e
		}
	}
	return out
}

// Forget drops a session's entries (it was deleted or expired).
func (a *Activity) Forget(tenant, sessionID string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if el, ok := a.sessions[activityKey(tenant, sessionID)]; ok {
		a.lru.Remove(el)
		delete(a.sessions, activityKey(tenant, sessionID))
	}
}

// excerptOf is s's start and end, redacted. The whole of s (already
// bounded by the caller) is redacted before it is cut: a secret's shape
// is often recognised only by its start (a PEM key by its BEGIN line), so
// an end cut from unredacted text could show the rest of it.
func excerptOf(s string) *OutputExcerpt {
	if s == "" {
		return nil
	}
	e := &OutputExcerpt{Bytes: len(s)}
	r := Redact(strings.ToValidUTF8(s, "\uFFFD"))
	if len(r) <= ExcerptHead+ExcerptTail {
		e.Text = r
		return e
	}
	e.Text = cutUTF8(r, ExcerptHead) + " … " + tailUTF8(r, ExcerptTail)
	e.Cut = true
	return e
}

// cutUTF8 is at most n bytes of s's start, ending on a whole character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tailUTF8 is at most n bytes of s's end, starting on a whole character.
func tailUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// Activity returns the hub's activity ring (never nil).
func (h *Hub) Activity() *Activity { return h.opts.Activity }

// HeldHere reports whether approval id is pending on this replica (its
// request waits here, so its session is served here): in a fleet, the
// context of a request held elsewhere is asked of its replica, which
// keeps the session's activity.
func (h *Hub) HeldHere(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pending[id] != nil
}
