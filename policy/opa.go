package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins"
	bundleplugin "github.com/open-policy-agent/opa/v1/plugins/bundle"
	"github.com/open-policy-agent/opa/v1/plugins/discovery"
	"github.com/open-policy-agent/opa/v1/plugins/logs"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"
)

// Policy sources (Options.Source).
const (
	// SourceFolder is the policy from Options.Dir, Options.FS or the tree
	// embedded in the binary, reloaded by Watch: the default.
	SourceFolder = "folder"
	// SourceBundle is the policy from OPA bundle services, configured by
	// the bundles section of Options.OPAConfig and kept current by OPA's
	// bundle plugin.
	SourceBundle = "bundle"
)

// ErrConfig wraps every reason Options.OPAConfig is refused.
var ErrConfig = errors.New("policy: invalid OPA configuration")

// shutdownGrace bounds how long stopping OPA's plugins may take to flush
// decision logs and the last status report when Close's ctx has no deadline.
const shutdownGrace = 10 // seconds, as plugins.GracefulShutdownPeriod wants

// opaRuntime is OPA's plugin manager and the plugins the configuration
// enables (bundle, decision_logs, status, discovery), run as `opa run`
// would run them. The engine still evaluates its own prepared queries:
// the manager is where bundles are downloaded, verified, activated,
// persisted and reported, and where decision logs are masked, buffered and
// uploaded.
type opaRuntime struct {
	manager *plugins.Manager
	logs    *logs.Plugin // nil without a decision_logs section
	log     *slog.Logger

	mu      sync.Mutex
	bundles map[string]bundleplugin.Status
	// stopping: downloads cancelled by Close are not refusals.
	stopping atomic.Bool

	logger *decisionLogger // nil without a decision_logs section
}

// opaConfig normalises the administrator's OPA configuration: YAML or JSON
// in, JSON out, with PersistDir as persistence_directory. It refuses what
// the source cannot honour (bundles for a folder, no bundles for a bundle
// source).
func opaConfig(raw []byte, source, persistDir string) ([]byte, error) {
	doc := map[string]any{}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := util.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if doc == nil {
			doc = map[string]any{}
		}
	}
	_, hasBundles := doc["bundles"]
	_, hasBundle := doc["bundle"]
	_, hasDiscovery := doc["discovery"]
	switch source {
	case SourceBundle:
		if !hasBundles && !hasDiscovery {
			return nil, fmt.Errorf("%w: source bundle needs a bundles (or discovery) section", ErrConfig)
		}
		if hasBundle {
			return nil, fmt.Errorf("%w: the deprecated bundle section is not supported; use bundles", ErrConfig)
		}
	default:
		if hasBundles || hasBundle || hasDiscovery {
			return nil, fmt.Errorf("%w: bundles and discovery need source bundle", ErrConfig)
		}
	}
	if _, ok := doc["plugins"]; ok {
		return nil, fmt.Errorf("%w: custom plugins are not available in the gateway", ErrConfig)
	}
	if persistDir != "" {
		doc["persistence_directory"] = persistDir
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return b, nil
}

// startOPA builds and starts the plugin manager. With a bundle source the
// manager's store is a vetoStore whose check is e.compileStore, so a bundle
// the engine cannot serve is refused inside OPA's activation. Starting
// activates a persisted bundle before it returns (the bundle plugin loads
// it in Start), so a restart with the bundle server down serves at once.
func (e *Engine) startOPA(ctx context.Context, opts Options) error {
	raw, err := opaConfig(opts.OPAConfig, e.sourceKind, opts.PersistDir)
	if err != nil {
		return err
	}
	r := &opaRuntime{log: e.log, bundles: map[string]bundleplugin.Status{}}
	var store storage.Store = inmem.New()
	var veto *vetoStore
	if e.sourceKind == SourceBundle {
		// Armed after the manager's Init, whose empty write is no bundle.
		veto = newVetoStore(store, nil, e.applyBundle)
		store = veto
	}
	ol := &opaLogger{l: e.log.With("component", "opa")}
	m, err := plugins.New(raw, opts.InstanceID, store,
		plugins.Logger(ol), plugins.ConsoleLogger(ol),
		plugins.WithParserOptions(ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1}),
		plugins.GracefulShutdownPeriod(shutdownGrace),
	)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	// discovery.New with no discovery section registers the bundle,
	// decision_logs and status plugins the configuration enables, wired
	// to each other as in `opa run` (bundle status reaches status).
	d, err := discovery.New(m)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	m.Register(discovery.Name, d)
	r.manager = m
	e.opa = r
	if bp := bundleplugin.Lookup(m); bp != nil {
		bp.RegisterBulkListener("sandgate", e.onBundleStatus)
	}
	// The manager outlives New's ctx: its downloaders and uploaders run
	// until Close.
	if err := m.Init(ctx); err != nil {
		m.Stop(ctx)
		return fmt.Errorf("policy: start OPA plugins: %w", err)
	}
	if veto != nil {
		veto.check = e.compileStore
	}
	if err := m.Start(context.WithoutCancel(ctx)); err != nil {
		m.Stop(ctx)
		return fmt.Errorf("policy: start OPA plugins: %w", err)
	}
	if r.logs = logs.Lookup(m); r.logs != nil {
		r.logger = newDecisionLogger(r.logs, e.log)
	}
	return nil
}

// onBundleStatus is the bundle plugin's report after every download
// attempt. A failed one (bad signature, compile error, the engine's own
// refusal, an unreachable server) is kept as the engine's last error until
// a bundle activates or the server answers that the bundle in force is
// current.
func (e *Engine) onBundleStatus(st map[string]*bundleplugin.Status) {
	r := e.opa
	if r.stopping.Load() {
		return
	}
	var failed []string
	r.mu.Lock()
	for name, s := range st {
		r.bundles[name] = *s
		if s.Code != "" {
			failed = append(failed, bundleError(name, s))
		}
	}
	r.mu.Unlock()
	sort.Strings(failed)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(failed) == 0 {
		e.lastErr, e.lastErrAt = nil, time.Time{}
		return
	}
	msg := strings.Join(failed, "; ")
	if e.lastErr == nil || e.lastErr.Error() != msg {
		e.reloadErrors++
		e.lastErr, e.lastErrAt = errors.New(msg), time.Now()
		e.log.Error("policy bundle not activated; last good revision stays in force",
			"revision", e.revisionLocked(), "err", e.lastErr)
	}
}

func bundleError(name string, s *bundleplugin.Status) string {
	msg := fmt.Sprintf("bundle %s: %s", name, s.Message)
	for _, err := range s.Errors {
		msg += ": " + err.Error()
	}
	return msg
}

// compileStore is the vetoStore check: it compiles what a bundle
// activation is about to commit, with the engine's own options, and
// refuses it when the engine could not serve it.
func (e *Engine) compileStore(ctx context.Context, txn storage.Transaction) (any, error) {
	return e.compileBundleStore(ctx, e.opa.manager.Store, txn)
}

// compileBundleStore compiles the modules and data of store as txn sees
// them (an activation about to commit), with the engine's own options.
// The active source and a shadow bundle both use it.
func (e *Engine) compileBundleStore(ctx context.Context, store storage.Store, txn storage.Transaction) (*compiled, error) {
	ids, err := store.ListPolicies(ctx, txn)
	if err != nil {
		return nil, fmt.Errorf("policy: list bundle modules: %w", err)
	}
	sort.Strings(ids)
	modules := make(map[string]*ast.Module, len(ids))
	h := sha256.New()
	popts := ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true}
	var errs []error
	for _, id := range ids {
		src, err := store.GetPolicy(ctx, txn, id)
		if err != nil {
			return nil, fmt.Errorf("policy: read bundle module %s: %w", id, err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", id, len(src))
		h.Write(src)
		m, err := ast.ParseModuleWithOpts(id, string(src), popts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		modules[id] = m
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, errors.Join(errs...))
	}
	data, revisions, err := e.bundleData(ctx, store, txn, h)
	if err != nil {
		return nil, err
	}
	c, err := compileParsed(ctx, modules, data, e.schemas)
	if err != nil {
		return nil, err
	}
	c.revision = "sha256:" + hex.EncodeToString(h.Sum(nil))
	c.files = ids
	c.bundles = revisions
	return c, nil
}

// bundleData copies the store's data out of txn (the copy is the compiled
// revision's own, so later activations never mutate what it evaluates
// against), hashes it into h and reads each bundle's manifest revision.
// data.system.bundles is OPA's bookkeeping (manifests, ETags): it stays in
// the copy but not in the hash, so a server that re-sends the same bundle
// under a new ETag does not make a new revision.
func (e *Engine) bundleData(ctx context.Context, store storage.Store, txn storage.Transaction, h interface{ Write([]byte) (int, error) }) (map[string]any, map[string]string, error) {
	v, err := store.Read(ctx, txn, storage.RootPath)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: read bundle data: %w", err)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: bundle data: %w", err)
	}
	data := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&data); err != nil {
		return nil, nil, fmt.Errorf("policy: bundle data: %w", err)
	}
	hashed := data
	if sys, ok := data["system"].(map[string]any); ok {
		if _, ok := sys["bundles"]; ok {
			hashed = cloneWithout(data, sys)
		}
	}
	hb, err := json.Marshal(hashed)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: bundle data: %w", err)
	}
	fmt.Fprintf(h, "data\x00%d\x00", len(hb))
	h.Write(hb)
	names, err := bundle.ReadBundleNamesFromStore(ctx, store, txn)
	if err != nil && !storage.IsNotFound(err) {
		return nil, nil, fmt.Errorf("policy: bundle names: %w", err)
	}
	revisions := make(map[string]string, len(names))
	for _, name := range names {
		rev, err := bundle.ReadBundleRevisionFromStore(ctx, store, txn, name)
		if err != nil && !storage.IsNotFound(err) {
			return nil, nil, fmt.Errorf("policy: bundle %s revision: %w", name, err)
		}
		revisions[name] = rev
	}
	return data, revisions, nil
}

// cloneWithout is data with data.system.bundles left out (shallow copies
// of the two maps on the way).
func cloneWithout(data, sys map[string]any) map[string]any {
	out := make(map[string]any, len(data))
	for k, v := range data {
		out[k] = v
	}
	s := make(map[string]any, len(sys))
	for k, v := range sys {
		if k != "bundles" {
			s[k] = v
		}
	}
	out["system"] = s
	return out
}

// applyBundle puts a committed bundle revision in force.
func (e *Engine) applyBundle(v any) {
	c := v.(*compiled)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.swapLocked(c)
}

// BundleStatus is one bundle in Status, in the shape of OPA's status API
// (bundles.<name> of a status report), so the fields read as they do in
// OPA's documentation.
type BundleStatus struct {
	Name                     string    `json:"name"`
	ActiveRevision           string    `json:"active_revision,omitempty"`
	LastSuccessfulActivation time.Time `json:"last_successful_activation,omitzero"`
	Type                     string    `json:"type,omitempty"`
	Size                     int       `json:"size,omitempty"`
	LastSuccessfulDownload   time.Time `json:"last_successful_download,omitzero"`
	LastSuccessfulRequest    time.Time `json:"last_successful_request,omitzero"`
	LastRequest              time.Time `json:"last_request,omitzero"`
	Code                     string    `json:"code,omitempty"`
	Message                  string    `json:"message,omitempty"`
	Errors                   []string  `json:"errors,omitempty"`
	HTTPCode                 string    `json:"http_code,omitempty"`
}

// bundleStatuses is the last report of every bundle, by name.
func (r *opaRuntime) bundleStatuses() map[string]BundleStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return statusesOf(r.bundles)
}

// statusesOf converts the bundle plugin's reports to BundleStatus.
func statusesOf(bundles map[string]bundleplugin.Status) map[string]BundleStatus {
	if len(bundles) == 0 {
		return nil
	}
	out := make(map[string]BundleStatus, len(bundles))
	for name, s := range bundles {
		bs := BundleStatus{
			Name: s.Name, ActiveRevision: s.ActiveRevision, LastSuccessfulActivation: s.LastSuccessfulActivation,
			Type: s.Type, Size: s.Size, LastSuccessfulDownload: s.LastSuccessfulDownload,
			LastSuccessfulRequest: s.LastSuccessfulRequest, LastRequest: s.LastRequest,
			Code: s.Code, Message: s.Message, HTTPCode: string(s.HTTPCode),
		}
		for _, err := range s.Errors {
			bs.Errors = append(bs.Errors, err.Error())
		}
		out[name] = bs
	}
	return out
}

// pluginStates is OPA's plugins section of a status report: each plugin's
// state (OK, NOT_READY, ERROR, WARN).
func (r *opaRuntime) pluginStates() map[string]string {
	out := map[string]string{}
	for name, s := range r.manager.PluginStatus() {
		if s != nil {
			out[name] = string(s.State)
		}
	}
	return out
}

// mirror writes a folder revision into the manager's store, with a
// compiler on the transaction, so OPA's decision-log plugin finds the
// policy's system.log mask and drop rules as it would in `opa run`.
func (r *opaRuntime) mirror(ctx context.Context, c *compiled, schemas *ast.SchemaSet) error {
	//lint:ignore SA1019 the same refusal, and error, as the engine's rego.UnsafeBuiltins; capabilities would call them undefined
	comp := ast.NewCompiler().WithSchemas(schemas).WithUnsafeBuiltins(unsafeBuiltins)
	if comp.Compile(c.modules); comp.Failed() {
		return fmt.Errorf("policy: mirror into OPA: %w", comp.Errors)
	}
	raw, err := json.Marshal(c.data)
	if err != nil {
		return fmt.Errorf("policy: mirror into OPA: %w", err)
	}
	var data map[string]any
	if err := util.UnmarshalJSON(raw, &data); err != nil {
		return fmt.Errorf("policy: mirror into OPA: %w", err)
	}
	store := r.manager.Store
	params := storage.WriteParams
	params.Context = storage.NewContext()
	err = storage.Txn(ctx, store, params, func(txn storage.Transaction) error {
		old, err := store.ListPolicies(ctx, txn)
		if err != nil {
			return err
		}
		for _, id := range old {
			if _, keep := c.sources[id]; !keep {
				if err := store.DeletePolicy(ctx, txn, id); err != nil {
					return err
				}
			}
		}
		for id, src := range c.sources {
			if err := store.UpsertPolicy(ctx, txn, id, src); err != nil {
				return err
			}
		}
		if err := store.Write(ctx, txn, storage.ReplaceOp, storage.RootPath, data); err != nil {
			return err
		}
		plugins.SetCompilerOnContext(params.Context, comp)
		return nil
	})
	if err != nil {
		return fmt.Errorf("policy: mirror into OPA: %w", err)
	}
	return nil
}

// stop flushes decision logs and the last status report, then stops the
// plugins.
func (r *opaRuntime) stop(ctx context.Context) {
	r.stopping.Store(true)
	if r.logger != nil {
		r.logger.close(ctx)
	}
	r.manager.Stop(ctx)
}

// opaLogger hands OPA's printf-style logging to the engine's slog logger.
// It reports Info as its level so OPA's debug output (request details) is
// never formatted at all.
type opaLogger struct {
	l      *slog.Logger
	fields []any
}

func (o *opaLogger) Debug(string, ...any) {}
func (o *opaLogger) Info(f string, a ...any) {
	o.l.Info(fmt.Sprintf(f, a...), o.fields...)
}
func (o *opaLogger) Warn(f string, a ...any) {
	o.l.Warn(fmt.Sprintf(f, a...), o.fields...)
}
func (o *opaLogger) Error(f string, a ...any) {
	o.l.Error(fmt.Sprintf(f, a...), o.fields...)
}
func (o *opaLogger) WithFields(f map[string]any) logging.Logger {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fields := slices.Clone(o.fields)
	for _, k := range keys {
		fields = append(fields, k, f[k])
	}
	return &opaLogger{l: o.l, fields: fields}
}
func (o *opaLogger) GetLevel() logging.Level { return logging.Info }
func (o *opaLogger) SetLevel(logging.Level)  {}
