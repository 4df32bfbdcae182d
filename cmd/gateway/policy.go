package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/policy"
)

// OPAConfig is policy.opa_config: the path of OPA's configuration file, or
// the document inline. It may hold credentials, so it prints and logs as
// a placeholder whatever it holds.
type OPAConfig struct {
	// Path is the file named by a scalar value.
	Path string
	// Inline is an inline document, re-encoded as YAML.
	Inline []byte
}

// UnmarshalYAML takes a string (a path) or a mapping (the document).
func (o *OPAConfig) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			*o = OPAConfig{}
			return nil
		}
		*o = OPAConfig{Path: n.Value}
		return nil
	case yaml.MappingNode:
		var doc map[string]any
		if err := n.Decode(&doc); err != nil {
			return err
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		*o = OPAConfig{Inline: b}
		return nil
	}
	return fmt.Errorf("line %d: policy.opa_config: want a file path or a mapping (OPA's configuration)", n.Line)
}

// IsZero reports whether no OPA configuration is set.
func (o OPAConfig) IsZero() bool { return o.Path == "" && len(o.Inline) == 0 }

// Bytes is the document: the file's content, or the inline one.
func (o OPAConfig) Bytes() ([]byte, error) {
	if o.Path == "" {
		return o.Inline, nil
	}
	b, err := os.ReadFile(o.Path)
	if err != nil {
		return nil, fmt.Errorf("policy.opa_config: %w", err)
	}
	return b, nil
}

// String, GoString and LogValue keep the document out of every print and
// log line: it may carry bearer tokens and private keys.
func (o OPAConfig) String() string {
	switch {
	case o.Path != "":
		return "file " + o.Path
	case len(o.Inline) > 0:
		return "inline (redacted)"
	}
	return ""
}

func (o OPAConfig) GoString() string { return o.String() }

func (o OPAConfig) LogValue() slog.Value { return slog.StringValue(o.String()) }

// validate checks the policy section's combinations.
func (c PolicyConfig) validate() []error {
	var errs []error
	switch c.Source {
	case "", policy.SourceFolder:
	case policy.SourceBundle:
		if c.OPAConfig.IsZero() {
			errs = append(errs, errors.New("policy.source bundle needs policy.opa_config (its services and bundles sections)"))
		}
		if c.Dir != "" {
			errs = append(errs, errors.New("policy.dir is set but policy.source is bundle (the policy comes from the bundle service)"))
		}
	default:
		errs = append(errs, fmt.Errorf("policy.source %q: want folder or bundle", c.Source))
	}
	if c.OPAConfig.Path != "" {
		if _, err := os.Stat(c.OPAConfig.Path); err != nil {
			errs = append(errs, fmt.Errorf("policy.opa_config: %w", err))
			return errs
		}
	}
	if !c.ShadowOPAConfig.IsZero() && c.ShadowDir != "" {
		errs = append(errs, errors.New("policy.shadow_dir and policy.shadow_opa_config are both set: the shadow candidate is one or the other"))
	}
	if c.ShadowOPAConfig.Path != "" {
		if _, err := os.Stat(c.ShadowOPAConfig.Path); err != nil {
			errs = append(errs, fmt.Errorf("policy.shadow_opa_config: %w", err))
			return errs
		}
	}
	if !c.AllowUnsignedBundles {
		errs = append(errs, unsignedBundles("policy.opa_config", c.OPAConfig)...)
		errs = append(errs, unsignedBundles("policy.shadow_opa_config", c.ShadowOPAConfig)...)
	}
	return errs
}

// unsignedBundles refuses each bundle of opa_config without a signing
// section (a keyid): fail closed, unless allow_unsigned_bundles says the
// operator means it.
func unsignedBundles(key string, o OPAConfig) []error {
	raw, err := o.Bytes()
	if err != nil || len(raw) == 0 {
		return nil // reported above, or nothing configured
	}
	var doc struct {
		Bundles map[string]struct {
			Signing *struct {
				KeyID string `yaml:"keyid"`
			} `yaml:"signing"`
		} `yaml:"bundles"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return []error{fmt.Errorf("%s: %w", key, err)}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(doc.Bundles)) {
		if b := doc.Bundles[name]; b.Signing == nil || b.Signing.KeyID == "" {
			errs = append(errs, fmt.Errorf("%s: bundle %q has no signing.keyid: its signature would not be "+
				"verified; name a key of its keys section, or set policy.allow_unsigned_bundles: true", key, name))
		}
	}
	return errs
}

// policyOptions are the policy engine's options for cfg: the folder or the
// bundle source, OPA's configuration (read here, never logged), where a
// persisted bundle lives (data_dir/opa unless set) and the instance id
// OPA's reports carry (the replica name unless set).
func policyOptions(cfg Config, log *slog.Logger) (policy.Options, error) {
	p := cfg.Policy
	opts := policy.Options{
		Dir: p.Dir, EvalTimeout: p.EvalTimeout, Logger: log, Source: p.Source,
		PersistDir: p.PersistDir, InstanceID: p.InstanceID, ShadowDir: p.ShadowDir,
	}
	raw, err := p.OPAConfig.Bytes()
	if err != nil {
		return opts, err
	}
	opts.OPAConfig = raw
	if opts.ShadowOPAConfig, err = p.ShadowOPAConfig.Bytes(); err != nil {
		return opts, fmt.Errorf("policy.shadow_opa_config: %w", errors.Unwrap(err))
	}
	if len(raw) > 0 || len(opts.ShadowOPAConfig) > 0 {
		if opts.PersistDir == "" {
			opts.PersistDir = filepath.Join(cfg.DataDir, "opa")
		}
		if opts.InstanceID == "" {
			opts.InstanceID = replicaName(cfg.Storage)
		}
	}
	return opts, nil
}

// policyCloseTimeout bounds the flush of decision logs and the last status
// report at shutdown.
const policyCloseTimeout = 10 * time.Second

// closePolicy stops OPA's plugins, uploading what decision logs they
// still buffer, within policyCloseTimeout. It runs once the HTTP server
// has drained and the manager is closed: no decision comes after it.
func (gw *gateway) closePolicy() {
	if gw.policy == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), policyCloseTimeout)
	defer cancel()
	if err := gw.policy.Close(ctx); err != nil {
		gw.log.Warn("policy close", "err", err)
	}
}

// policyCollector exports the policy's state at each scrape: the revision
// in force (a fleet has converged when every replica reports the same
// one), each OPA bundle's active revision and whether its last download
// was refused, reloads and refusals, decision-log counts, and the shadow
// policy's evaluations and disagreements by path.
type policyCollector struct {
	e *policy.Engine

	info, bundle, bundleErr, reloads, reloadErrs *prometheus.Desc
	logged, logFailed, logBuffered               *prometheus.Desc
	shadowInfo, shadowEval, shadowDisagree       *prometheus.Desc
}

func newPolicyCollector(e *policy.Engine) *policyCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sandgate_policy_"+name, help, labels, nil)
	}
	return &policyCollector{
		e:              e,
		info:           d("info", "The policy revision in force (1); absent while none is (a bundle source before its first activation).", "source", "revision"),
		bundle:         d("bundle_info", "Each OPA bundle's active revision (1).", "bundle", "revision"),
		bundleErr:      d("bundle_error", "1 when the bundle's last download or activation was refused (the last good revision stays).", "bundle"),
		reloads:        d("reloads_total", "Policy revisions put in force after the first."),
		reloadErrs:     d("reload_errors_total", "Policy revisions refused (compile error, bad signature, a bundle the engine cannot serve)."),
		logged:         d("decision_logs_total", "Decisions handed to OPA's decision-log plugin."),
		logFailed:      d("decision_log_failures_total", "Decisions OPA's decision-log plugin refused."),
		logBuffered:    d("decision_log_buffered", "Decision-log data waiting for upload (bytes or events, as the plugin buffers)."),
		shadowInfo:     d("shadow_info", "The shadow policy's revision (1).", "revision"),
		shadowEval:     d("shadow_evaluations_total", "Decisions the shadow policy was asked beside the active one.", "path"),
		shadowDisagree: d("shadow_disagreements_total", "Decisions where the shadow policy would have decided otherwise.", "path"),
	}
}

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.bundle, c.bundleErr, c.reloads, c.reloadErrs,
		c.logged, c.logFailed, c.logBuffered, c.shadowInfo, c.shadowEval, c.shadowDisagree} {
		ch <- d
	}
}

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.e.Status()
	if st.Revision != "" {
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, st.Source, st.Revision)
	}
	for _, name := range sortedKeys(st.Bundles) {
		b := st.Bundles[name]
		if b.ActiveRevision != "" {
			ch <- prometheus.MustNewConstMetric(c.bundle, prometheus.GaugeValue, 1, name, b.ActiveRevision)
		}
		failed := 0.0
		if b.Code != "" {
			failed = 1
		}
		ch <- prometheus.MustNewConstMetric(c.bundleErr, prometheus.GaugeValue, failed, name)
	}
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(st.Reloads))
	ch <- prometheus.MustNewConstMetric(c.reloadErrs, prometheus.CounterValue, float64(st.ReloadErrors))
	if dl := st.DecisionLogs; dl != nil {
		ch <- prometheus.MustNewConstMetric(c.logged, prometheus.CounterValue, float64(dl.Logged))
		ch <- prometheus.MustNewConstMetric(c.logFailed, prometheus.CounterValue, float64(dl.Failed))
		ch <- prometheus.MustNewConstMetric(c.logBuffered, prometheus.GaugeValue, float64(dl.Buffered))
	}
	sh, ok := c.e.ShadowStatus()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.shadowInfo, prometheus.GaugeValue, 1, sh.Revision)
	paths := make([]string, 0, len(sh.Evaluated))
	for p := range sh.Evaluated {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		ch <- prometheus.MustNewConstMetric(c.shadowEval, prometheus.CounterValue, float64(sh.Evaluated[p]), p)
		ch <- prometheus.MustNewConstMetric(c.shadowDisagree, prometheus.CounterValue, float64(sh.Disagreements[p]), p)
	}
}
