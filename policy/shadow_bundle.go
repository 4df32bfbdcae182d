package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/plugins"
	bundleplugin "github.com/open-policy-agent/opa/v1/plugins/bundle"
	"github.com/open-policy-agent/opa/v1/plugins/discovery"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"
)

// shadowBundleName names a candidate bundle file's revision in
// ShadowStatus.BundleRevisions.
const shadowBundleName = "candidate"

// shadowOPA is the plugin manager of a candidate policy from bundles. It
// runs OPA's bundle plugin only, as `opa run` would (download, ETag and
// long polling, signature verification, persistence), with a store of
// its own whose commits the engine's compile vetoes, exactly as for the
// active bundle source. What activates becomes the shadow's candidate;
// nothing of it is ever enforced.
type shadowOPA struct {
	manager *plugins.Manager

	mu        sync.Mutex
	bundles   map[string]bundleplugin.Status
	lastErr   string
	lastErrAt time.Time
}

// shadowConfig normalises a candidate's OPA configuration: it must name
// bundles, and may not configure what belongs to the active policy
// (decision logs, status, discovery) or custom plugins. persistDir, when
// set, is the candidate's own persistence directory, so a candidate
// bundle named like the active one never overwrites its persisted copy.
func shadowConfig(raw []byte, persistDir string) ([]byte, error) {
	doc := map[string]any{}
	if err := util.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: shadow: %w", ErrConfig, err)
	}
	if doc == nil {
		doc = map[string]any{}
	}
	if _, ok := doc["bundles"]; !ok {
		return nil, fmt.Errorf("%w: shadow: a candidate from bundles needs a bundles section", ErrConfig)
	}
	for _, k := range []string{"bundle", "decision_logs", "status", "discovery", "plugins"} {
		if _, ok := doc[k]; ok {
			return nil, fmt.Errorf("%w: shadow: the %s section is not allowed (a candidate's decisions are never logged or reported on their own)", ErrConfig, k)
		}
	}
	if persistDir != "" {
		doc["persistence_directory"] = filepath.Join(persistDir, "shadow")
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: shadow: %w", ErrConfig, err)
	}
	return b, nil
}

// loadShadowFile loads a candidate bundle file (.tar.gz, as `opa build`
// writes it) from the gateway's disk, once, as a folder would be. Like
// `sandgate policy check` it does not verify the file's signature: the
// file is as trusted as a policy folder on the same disk. A candidate
// file to verify is configured as a bundle (ShadowOPAConfig) whose
// resource is a file:// URL, with a signing section.
func (e *Engine) loadShadowFile(ctx context.Context, s *shadow, p string) error {
	if !strings.HasSuffix(p, ".tar.gz") && !strings.HasSuffix(p, ".tgz") {
		return fmt.Errorf("%w: shadow: %s is neither a folder nor a bundle file (.tar.gz)", ErrConfig, p)
	}
	fsys, revision, err := bundleFS(p)
	if err != nil {
		return fmt.Errorf("policy shadow: %w", err)
	}
	c, err := compileTree(ctx, fsys, e.schemas)
	if err != nil {
		return fmt.Errorf("policy shadow: %w", err)
	}
	c.bundles = map[string]string{shadowBundleName: revision}
	s.c.Store(c)
	e.shadow = s
	return nil
}

// startShadowOPA starts the candidate's plugin manager. A persisted or
// local candidate activates before it returns; one from a server
// activates when downloaded, and until then the shadow evaluates nothing.
func (e *Engine) startShadowOPA(ctx context.Context, s *shadow, raw []byte, opts Options) error {
	raw, err := shadowConfig(raw, opts.PersistDir)
	if err != nil {
		return err
	}
	r := &shadowOPA{bundles: map[string]bundleplugin.Status{}}
	// Armed after the manager's Init, whose empty write is no bundle.
	veto := newVetoStore(inmem.New(), nil, func(v any) { s.c.Store(v.(*compiled)) })
	ol := &opaLogger{l: e.log.With("component", "opa", "policy", "shadow")}
	m, err := plugins.New(raw, opts.InstanceID, veto,
		plugins.Logger(ol), plugins.ConsoleLogger(ol),
		plugins.WithParserOptions(ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1}),
		plugins.GracefulShutdownPeriod(shutdownGrace),
	)
	if err != nil {
		return fmt.Errorf("%w: shadow: %w", ErrConfig, err)
	}
	// Without a discovery section, discovery.New registers the plugins
	// the configuration enables: here, the bundle plugin alone.
	d, err := discovery.New(m)
	if err != nil {
		return fmt.Errorf("%w: shadow: %w", ErrConfig, err)
	}
	m.Register(discovery.Name, d)
	r.manager = m
	s.opa = r
	if bp := bundleplugin.Lookup(m); bp != nil {
		bp.RegisterBulkListener("sandgate-shadow", func(st map[string]*bundleplugin.Status) { r.onStatus(e, st) })
	}
	if err := m.Init(ctx); err != nil {
		m.Stop(ctx)
		return fmt.Errorf("policy shadow: start OPA plugins: %w", err)
	}
	veto.check = func(ctx context.Context, txn storage.Transaction) (any, error) {
		return e.compileBundleStore(ctx, m.Store, txn)
	}
	if err := m.Start(context.WithoutCancel(ctx)); err != nil {
		m.Stop(ctx)
		return fmt.Errorf("policy shadow: start OPA plugins: %w", err)
	}
	return nil
}

// onStatus keeps the bundle plugin's report after every download attempt,
// and the refusal of the latest failed one until a candidate activates.
func (r *shadowOPA) onStatus(e *Engine, st map[string]*bundleplugin.Status) {
	var failed []string
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range st {
		r.bundles[name] = *s
		if s.Code != "" {
			failed = append(failed, bundleError(name, s))
		}
	}
	if len(failed) == 0 {
		r.lastErr, r.lastErrAt = "", time.Time{}
		return
	}
	sort.Strings(failed)
	if msg := strings.Join(failed, "; "); msg != r.lastErr {
		r.lastErr, r.lastErrAt = msg, time.Now()
		e.log.Warn("shadow policy bundle not activated; the last good candidate stays", "err", errors.New(msg))
	}
}

// report is the candidate bundles' status in OPA's shape and the last
// refusal.
func (r *shadowOPA) report() (map[string]BundleStatus, string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return statusesOf(r.bundles), r.lastErr, r.lastErrAt
}

func (r *shadowOPA) stop(ctx context.Context) { r.manager.Stop(ctx) }
