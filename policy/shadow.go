package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// shadowRecent is how many disagreements ShadowStatus lists.
const shadowRecent = 100

// ShadowStatus is what GET /v1/policy/shadow shows: how often the
// candidate policy was asked beside the active one, how often it decided
// otherwise, and the latest disagreements.
type ShadowStatus struct {
	Source   string    `json:"source"`
	Revision string    `json:"revision"`
	LoadedAt time.Time `json:"loaded_at"`
	// Evaluated and Disagreements count decisions by path
	// (sandgate/exec/decision, sandgate/egress/decision, ...).
	Evaluated     map[string]uint64 `json:"evaluated"`
	Disagreements map[string]uint64 `json:"disagreements"`
	// Recent are the latest disagreements, oldest first.
	Recent []ShadowDisagreement `json:"recent"`
}

// ShadowDisagreement is one decision the candidate would have made
// otherwise. The input is named by its digest, never copied: it is enough
// to find the audit record (by decision_id) and to tell identical inputs
// apart, and it keeps what the input holds out of the listing.
type ShadowDisagreement struct {
	At          time.Time    `json:"at"`
	DecisionID  string       `json:"decision_id"`
	Path        string       `json:"path"`
	InputSHA256 string       `json:"input_sha256"`
	Active      ShadowAnswer `json:"active"`
	Candidate   ShadowAnswer `json:"candidate"`
}

// ShadowAnswer is one side of a disagreement.
type ShadowAnswer struct {
	Action   string   `json:"action"`
	Executor string   `json:"executor,omitempty"`
	Reasons  []string `json:"reasons"`
}

// shadow is a candidate policy evaluated on every decision and never
// enforced.
type shadow struct {
	source string
	c      *compiled

	mu            sync.Mutex
	evaluated     map[string]uint64
	disagreements map[string]uint64
	recent        []ShadowDisagreement
}

// loadShadow compiles the candidate at dir (or fsys, for tests) with the
// engine's options. A candidate that does not compile is an error: the
// administrator asked for it.
func (e *Engine) loadShadow(ctx context.Context, dir string, fsys fs.FS) error {
	source := "fs"
	if dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("policy shadow dir: %w", err)
		}
		fsys, source = os.DirFS(dir), dir
	}
	c, err := compileTree(ctx, fsys, e.schemas)
	if err != nil {
		return fmt.Errorf("policy shadow: %w", err)
	}
	e.shadow = &shadow{source: source, c: c, evaluated: map[string]uint64{}, disagreements: map[string]uint64{}}
	return nil
}

// ShadowStatus reports the candidate policy's record; false when none is
// configured.
func (e *Engine) ShadowStatus() (ShadowStatus, bool) {
	s := e.shadow
	if s == nil {
		return ShadowStatus{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ShadowStatus{
		Source: s.source, Revision: s.c.revision, LoadedAt: s.c.loadedAt,
		Evaluated: map[string]uint64{}, Disagreements: map[string]uint64{},
		Recent: append([]ShadowDisagreement(nil), s.recent...),
	}
	for k, v := range s.evaluated {
		st.Evaluated[k] = v
	}
	for k, v := range s.disagreements {
		st.Disagreements[k] = v
	}
	return st, true
}

// record counts one shadow evaluation, and keeps it when the candidate
// disagreed. input is what both policies saw (an ast.Value or a map).
func (s *shadow) record(path, id string, input any, active, candidate ShadowAnswer) {
	agree := active.Action == candidate.Action && active.Executor == candidate.Executor
	var d ShadowDisagreement
	if !agree {
		d = ShadowDisagreement{At: time.Now(), DecisionID: id, Path: path, InputSHA256: inputDigest(input),
			Active: active, Candidate: candidate}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evaluated[path]++
	if agree {
		return
	}
	s.disagreements[path]++
	if len(s.recent) == shadowRecent {
		s.recent = append(s.recent[:0], s.recent[1:]...)
	}
	s.recent = append(s.recent, d)
}

// inputDigest is the SHA-256 of the input's JSON (object keys sorted, as
// encoding/json writes maps), so equal inputs have equal digests.
func inputDigest(input any) string {
	if v, ok := input.(ast.Value); ok {
		j, err := ast.JSON(v)
		if err != nil {
			return ""
		}
		input = j
	}
	b, err := json.Marshal(input)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func shadowCodes(rs []Reason) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Code
	}
	return out
}

// shadowExec asks the candidate the exec question and records the answer.
func (e *Engine) shadowExec(ctx context.Context, input ast.Value, d Decision) {
	s := e.shadow
	if s == nil || input == nil {
		return // no input: the active side failed before evaluating
	}
	sd := e.decideValue(ctx, s.c, input)
	s.record(execLogPath, d.DecisionID, input,
		ShadowAnswer{Action: d.Action, Executor: d.Executor, Reasons: shadowCodes(d.Reasons)},
		ShadowAnswer{Action: sd.Action, Executor: sd.Executor, Reasons: shadowCodes(sd.Reasons)})
}

func (e *Engine) shadowBrowser(ctx context.Context, input map[string]any, d BrowserDecision) {
	s := e.shadow
	if s == nil {
		return
	}
	sd := e.decideBrowser(ctx, s.c, input)
	s.record(browserLogPath, d.DecisionID, input,
		ShadowAnswer{Action: d.Action, Reasons: shadowCodes(d.Reasons)},
		ShadowAnswer{Action: sd.Action, Reasons: shadowCodes(sd.Reasons)})
}

func (e *Engine) shadowEgress(ctx context.Context, input map[string]any, d EgressDecision) {
	s := e.shadow
	if s == nil {
		return
	}
	sd := e.decideEgress(ctx, s.c, input)
	s.record(egressLogPath, d.DecisionID, input,
		ShadowAnswer{Action: d.Action, Reasons: shadowCodes(d.Reasons)},
		ShadowAnswer{Action: sd.Action, Reasons: shadowCodes(sd.Reasons)})
}
