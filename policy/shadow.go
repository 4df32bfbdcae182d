package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// shadowRecent is how many disagreements ShadowStatus lists.
const shadowRecent = 100

// ShadowStatus is what GET /v1/policy/shadow shows: how often the
// candidate policy was asked beside the active one, how often it decided
// otherwise, and the latest disagreements.
type ShadowStatus struct {
	Source string `json:"source"`
	// Revision is the content hash of the candidate in force; empty while
	// a candidate bundle has not activated yet (nothing is evaluated
	// then).
	Revision string    `json:"revision"`
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// BundleRevisions is the manifest revision of each bundle the
	// candidate in force was built from (a candidate bundle or bundle
	// file).
	BundleRevisions map[string]string `json:"bundle_revisions,omitempty"`
	// Bundles is OPA's report of each candidate bundle (a candidate from
	// bundles): the active revision, the last download and activation,
	// and the error of the last refused one (code bundle_error), as in
	// GET /v1/policy.
	Bundles map[string]BundleStatus `json:"bundles,omitempty"`
	// LastError is why the latest candidate bundle was refused (a
	// signature that does not verify, a policy that does not compile, an
	// unreachable server), kept until one activates.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
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
	c      atomic.Pointer[compiled] // nil until a candidate bundle activates
	opa    *shadowOPA               // nil for a candidate folder

	mu            sync.Mutex
	evaluated     map[string]uint64
	disagreements map[string]uint64
	recent        []ShadowDisagreement
}

// loadShadow starts the candidate policy: from OPA bundles
// (opts.ShadowOPAConfig), a bundle file (opts.ShadowDir naming a file),
// or a folder (opts.ShadowDir, or opts.ShadowFS for tests), compiled with
// the engine's options. A candidate folder that does not compile is an
// error: the administrator asked for it. A candidate bundle is refused
// like an active one, and reported in ShadowStatus.
func (e *Engine) loadShadow(ctx context.Context, opts Options) error {
	s := &shadow{source: "fs", evaluated: map[string]uint64{}, disagreements: map[string]uint64{}}
	dir, fsys := opts.ShadowDir, opts.ShadowFS
	raw := opts.ShadowOPAConfig
	if len(raw) > 0 && dir != "" {
		return fmt.Errorf("%w: a shadow policy is a folder or bundles, not both", ErrConfig)
	}
	if dir != "" {
		st, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("policy shadow dir: %w", err)
		}
		s.source = dir
		if !st.IsDir() {
			return e.loadShadowFile(ctx, s, dir)
		}
		fsys = os.DirFS(dir)
	}
	if len(raw) > 0 {
		if len(opts.ShadowOPAConfig) > 0 {
			s.source = "bundle"
		}
		e.shadow = s
		return e.startShadowOPA(ctx, s, raw, opts)
	}
	c, err := compileTree(ctx, fsys, e.schemas)
	if err != nil {
		return fmt.Errorf("policy shadow: %w", err)
	}
	s.c.Store(c)
	e.shadow = s
	return nil
}

// ShadowStatus reports the candidate policy's record; false when none is
// configured.
func (e *Engine) ShadowStatus() (ShadowStatus, bool) {
	s := e.shadow
	if s == nil {
		return ShadowStatus{}, false
	}
	st := ShadowStatus{Source: s.source}
	if c := s.c.Load(); c != nil {
		st.Revision, st.LoadedAt = c.revision, c.loadedAt
		if len(c.bundles) > 0 {
			st.BundleRevisions = maps.Clone(c.bundles)
		}
	}
	if s.opa != nil {
		st.Bundles, st.LastError, st.LastErrorAt = s.opa.report()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Evaluated, st.Disagreements = map[string]uint64{}, map[string]uint64{}
	st.Recent = append([]ShadowDisagreement(nil), s.recent...)
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
	c := s.c.Load()
	if c == nil {
		return // no candidate bundle has activated yet
	}
	sd := e.decideValue(ctx, c, input)
	s.record(execLogPath, d.DecisionID, input,
		ShadowAnswer{Action: d.Action, Executor: d.Executor, Reasons: shadowCodes(d.Reasons)},
		ShadowAnswer{Action: sd.Action, Executor: sd.Executor, Reasons: shadowCodes(sd.Reasons)})
}

func (e *Engine) shadowBrowser(ctx context.Context, input map[string]any, d BrowserDecision) {
	s := e.shadow
	if s == nil {
		return
	}
	c := s.c.Load()
	if c == nil {
		return
	}
	sd := e.decideBrowser(ctx, c, input)
	s.record(browserLogPath, d.DecisionID, input,
		ShadowAnswer{Action: d.Action, Reasons: shadowCodes(d.Reasons)},
		ShadowAnswer{Action: sd.Action, Reasons: shadowCodes(sd.Reasons)})
}

func (e *Engine) shadowEgress(ctx context.Context, input map[string]any, d EgressDecision) {
	s := e.shadow
	if s == nil {
		return
	}
	c := s.c.Load()
	if c == nil {
		return
	}
	sd := e.decideEgress(ctx, c, input)
	s.record(egressLogPath, d.DecisionID, input,
		ShadowAnswer{Action: d.Action, Reasons: shadowCodes(d.Reasons)},
		ShadowAnswer{Action: sd.Action, Reasons: shadowCodes(sd.Reasons)})
}
