package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sandgate/sandgate/api"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/browser"
	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/daytona"
	"github.com/sandgate/sandgate/deerflow"
	"github.com/sandgate/sandgate/e2b"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/events"
	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/aio"
	"github.com/sandgate/sandgate/executors/docker"
	"github.com/sandgate/sandgate/executors/gvisor"
	"github.com/sandgate/sandgate/executors/subprocess"
	"github.com/sandgate/sandgate/fleet"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/mcp"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/risk"
	"github.com/sandgate/sandgate/workspace"
)

// gateway is the wired process.
type gateway struct {
	cfg      Config
	log      *slog.Logger
	stdout   io.Writer
	listener net.Listener
	server   *http.Server
	manager  *manager.Manager
	policy   *policy.Engine
	audit    audit.Database
	later    *audit.Later    // gw.audit on SQLite, for the manager and the API (runAudit); nil on PostgreSQL
	hub      *confirm.Hub    // nil when auto-approve is configured
	replicas *fleet.Registry // nil on sqlite
	router   *fleet.Router   // nil on sqlite
	// leaveOnce: the grace after leaving the fleet is waited once.
	leaveOnce sync.Once
	// execs are the executors built, released by releaseBuilt when the
	// start-up fails after them.
	execs    []executors.Executor
	aio      *aio.Executor
	browser  *browser.Manager
	mcp      *mcp.Server        // nil when disabled
	deerflow *deerflow.Registry // nil when disabled
	e2b      *e2b.Registry      // nil when disabled
	egress   *egress.Service    // nil when disabled
	events   *events.Log
	// baseCancel ends every request context; called when the shutdown
	// deadline passes so running executions are killed, not abandoned.
	baseCancel context.CancelFunc
	secrets    map[api.Role]string
}

func newLogger(level string, w io.Writer) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level)) // validated in Config.Validate
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv, ReplaceAttr: redact}))
}

// redact is a last line of defence: no attribute whose key suggests a
// credential is ever written, whatever a caller passes.
func redact(_ []string, a slog.Attr) slog.Attr {
	k := strings.ToLower(a.Key)
	if strings.Contains(k, "token") || strings.Contains(k, "secret") || strings.Contains(k, "authorization") {
		return slog.String(a.Key, "REDACTED")
	}
	return a
}

// build wires every component. Anything that fails closes what was opened.
func build(ctx context.Context, cfg Config, getenv func(string) string, stdout, stderr io.Writer) (_ *gateway, err error) {
	gw := &gateway{cfg: cfg, log: newLogger(cfg.Log.Level, stderr), stdout: stdout}
	defer func() {
		if err != nil {
			gw.releaseBuilt()
			gw.closeStores()
		}
	}()
	tokens, err := gw.tokens()
	if err != nil {
		return nil, err
	}
	auth, err := gw.auth(ctx, tokens)
	if err != nil {
		return nil, err
	}
	if err := prepareDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if gw.audit, err = gw.openStorage(ctx); err != nil {
		return nil, err
	}
	if err := gw.joinFleet(ctx); err != nil {
		return nil, err
	}
	if err := gw.openEvents(ctx); err != nil {
		return nil, err
	}
	if gw.router, err = gw.sessionRouter(ctx); err != nil {
		return nil, err
	}
	if err := gw.resolveInterrupted(ctx); err != nil {
		return nil, err
	}
	quotas := quotaConfig(cfg, tokens)
	workspaces, err := workspace.New(filepath.Join(cfg.DataDir, "workspaces"), workspace.Options{
		MaxFileBytes: int64(cfg.Workspace.MaxFileMiB) << 20, QuotaBytes: cfg.Workspace.QuotaMiB << 20,
		QuotaFiles:       cfg.Workspace.QuotaFiles,
		TenantQuotaBytes: func(tenant string) int64 { return quotas.For(tenant).MaxWorkspaceBytes },
	})
	if err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if err := workspaces.CheckReachable(); err != nil {
			return nil, err
		}
	}
	popts, err := policyOptions(cfg, gw.log)
	if err != nil {
		return nil, err
	}
	if gw.policy, err = policy.New(ctx, popts); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	assessor, err := gw.assessor()
	if err != nil {
		return nil, err
	}
	execs, err := gw.executors(ctx, workspaces)
	if err != nil {
		return nil, err
	}
	gw.execs = execs
	if err := gw.browsers(workspaces); err != nil {
		return nil, err
	}
	confirmer, err := gw.confirmer(ctx, getenv)
	if err != nil {
		return nil, err
	}
	gw.watchFleet()
	if cfg.DeerFlow.Enabled {
		// The DeerFlow sandboxes live in the gateway's database, shared
		// by a fleet's replicas like approvals and session records.
		if gw.deerflow, err = deerflow.OpenRegistry(ctx, gw.audit); err != nil {
			return nil, err
		}
	}
	if cfg.E2B.Enabled {
		// The E2B sandboxes' records (tokens as digests) live in the
		// gateway's database too: any replica of a fleet finds them.
		if gw.e2b, err = e2b.OpenRegistry(ctx, gw.audit); err != nil {
			return nil, err
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newPolicyCollector(gw.policy))
	if err := gw.egressProxy(confirmer, reg, getenv); err != nil {
		return nil, err
	}
	metrics := manager.NewMetrics(reg)
	reg.MustRegister(manager.NewPoolCollector(execs)) // sandgate_pool_*: the executors' pre-started sandboxes
	runAudit := gw.runAudit(metrics)
	deps := manager.Deps{
		Assessor: assessor, Policy: gw.policy, Confirm: confirmer, Executors: execs, Workspaces: workspaces,
		Audit: runAudit, Metrics: metrics, Logger: gw.log, Resources: gw.resources(),
		Sessions: gw.audit, Placement: gw.placement(), Events: manager.LogSink{Log: gw.events},
		// Each front end's paths inside the sandbox (REST, MCP: /workspace).
		Layouts: map[string]manager.Layout{deerflow.FrontEnd: deerflow.Layout, e2b.FrontEnd: e2b.Layout, daytona.FrontEnd: daytona.Layout},
	}
	if gw.egress != nil { // a nil *Service in the interface would not read as "no proxy"
		deps.Egress = gw.egress
	}
	if gw.hub != nil { // the page's timeline: runs' output excerpts and file diffs
		deps.Activity = gw.hub.Activity()
	}
	gw.manager, err = manager.New(manager.Config{
		Mode: cfg.Mode, MaxCodeBytes: cfg.Limits.MaxCodeBytes, DefaultTimeout: cfg.Limits.DefaultTimeout,
		ApprovalTimeout: cfg.Approval.Timeout, Quotas: quotas, Replica: replicaName(cfg.Storage),
		PauseIdleAfter: cfg.Sessions.PauseIdleAfter,
		// Named snapshots beside the paused sessions' checkpoints, in the
		// data directory a fleet shares.
		Snapshots: manager.SnapshotConfig{Dir: filepath.Join(cfg.DataDir, "snapshots", "named"),
			Retention: cfg.Sessions.SnapshotRetention, Compress: cfg.Sessions.SnapshotCompress},
	}, deps)
	if err != nil {
		return nil, err
	}
	if err := gw.manager.Start(ctx); err != nil {
		return nil, err
	}
	mcpServer, err := gw.mcpServer()
	if err != nil {
		return nil, err
	}
	deerflowServer, err := gw.deerflowServer(runAudit)
	if err != nil {
		return nil, err
	}
	e2bServer, err := gw.e2bServer()
	if err != nil {
		return nil, err
	}
	daytonaServer, err := gw.daytonaServer()
	if err != nil {
		return nil, err
	}
	apiDeps := api.Deps{
		Manager: gw.manager, Policy: gw.policy, Audit: runAudit, Auth: auth, Gatherer: reg, Logger: gw.log,
		Approvals: gw.hub, Browser: gw.browser, MCP: mcpServer, Database: gw.audit, AuditChain: gw.audit, DeerFlow: deerflowServer,
		Events: gw.events, E2B: e2bServer, Daytona: daytonaServer,
	}
	if gw.router != nil {
		apiDeps.Fleet = gw.router
	}
	handler := api.New(api.Config{MaxBodyBytes: cfg.Limits.MaxBodyBytes}, apiDeps)
	if err := gw.listen(handler); err != nil {
		return nil, err
	}
	// An event stream would hold a graceful shutdown to its deadline.
	gw.server.RegisterOnShutdown(handler.EndStreams)
	if err := gw.advertise(ctx); err != nil {
		return nil, err
	}
	return gw, nil
}

// quotaConfig is the manager's view of tenants.quotas and overrides. The
// configured tenants (tokens' and overrides') are the values the metrics'
// tenant label may take.
func quotaConfig(cfg Config, tokens []api.Token) manager.QuotaConfig {
	q := manager.QuotaConfig{Default: managerQuota(cfg.Tenants.Quotas), Tenants: map[string]manager.Quota{}}
	for name, o := range cfg.Tenants.Overrides {
		q.Tenants[name] = managerQuota(o.over(cfg.Tenants.Quotas))
		q.Labels = append(q.Labels, name)
	}
	for _, t := range tokens {
		if !slices.Contains(q.Labels, t.Tenant) {
			q.Labels = append(q.Labels, t.Tenant)
		}
	}
	return q
}

func managerQuota(c QuotaConfig) manager.Quota {
	return manager.Quota{MaxSessions: c.MaxSessions, MaxConcurrentRuns: c.MaxConcurrentRuns,
		MaxWorkspaceBytes: c.MaxWorkspaceMiB << 20, RequestsPerSecond: c.RequestsPerSecond, Burst: c.Burst,
		MaxSnapshots: c.MaxSnapshots, MaxSnapshotBytes: c.MaxSnapshotMiB << 20}
}

// prepareDataDir creates the data directory 0711: sandboxed code runs as
// unprivileged uids that must traverse it to reach their own workspace, but
// may not list it. The audit database lives in a 0700 subdirectory.
func prepareDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	return nil
}

func (gw *gateway) assessor() (*risk.Assessor, error) {
	var rules *risk.RuleSet
	if gw.cfg.Risk.RulesFile != "" {
		var err error
		if rules, err = risk.LoadRules(gw.cfg.Risk.RulesFile); err != nil {
			return nil, fmt.Errorf("risk rules: %w", err)
		}
	}
	return risk.NewAssessor(rules, gw.log), nil
}

func (gw *gateway) executors(ctx context.Context, ws *workspace.Workspaces) (_ []executors.Executor, err error) {
	var out []executors.Executor
	defer func() {
		if err != nil {
			closeExecutors(out, gw.log)
		}
	}()
	if sp := gw.cfg.Executors.Subprocess; sp.Enabled {
		e, err := subprocess.New(ctx, subprocessConfig(sp, gw.log))
		if err != nil {
			return nil, fmt.Errorf("subprocess executor: %w", err)
		}
		if err := e.Available(ctx); err != nil {
			// Kept in the list: /readyz and the policy input show why, and
			// the policy denies what it would have run here.
			gw.log.Warn("subprocess executor unavailable", "isolation", e.Isolation(), "err", err)
		} else {
			gw.log.Info("subprocess executor ready", "isolation", e.Isolation(), "root", e.RootID())
		}
		out = append(out, e)
	}
	if d := gw.cfg.Executors.Docker; d.Enabled {
		e, err := docker.New(ctx, gw.withSnapshots(dockerConfig(d, gw.log)))
		if err != nil {
			return nil, fmt.Errorf("docker executor: %w", err)
		}
		if err := e.Available(ctx); err != nil {
			gw.log.Warn("docker engine not reachable; requests routed to docker get 503 until it answers", "err", err)
		}
		out = append(out, e)
	}
	if g := gw.cfg.Executors.GVisor; g.Enabled {
		e, err := gvisor.New(ctx, gw.withSnapshots(dockerConfig(g, gw.log)))
		if err != nil {
			return nil, fmt.Errorf("gvisor executor: %w", err)
		}
		if err := e.Available(ctx); err != nil {
			// Kept in the list: the policy input says it is unavailable,
			// and the default policy sends what it would have run to
			// docker with a reason saying so.
			gw.log.Warn("gvisor executor unavailable (make gvisor; scripts/dockerd.sh registers runsc, see the README)", "err", err)
		}
		out = append(out, e)
	}
	if a := gw.cfg.Executors.AIO; a.Enabled {
		if e := gw.aioPool(ctx, a.PoolConfig, ws); e != nil {
			out = append(out, e)
		}
	}
	if k := gw.cfg.Executors.Kubernetes; k.Enabled {
		e, err := gw.kubernetesExecutor(ctx, k)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// releaseBuilt releases what a start-up that failed half-way had built:
// the manager's sessions and executors (warm and pooled containers, aio
// instances), or the executors alone when the manager was not built.
func (gw *gateway) releaseBuilt() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if gw.browser != nil {
		_ = gw.browser.Close(ctx)
	}
	if gw.manager != nil {
		if err := gw.manager.Close(ctx); err != nil {
			gw.log.Warn("release after a failed start", "err", err)
		}
		return
	}
	closeExecutors(gw.execs, gw.log)
}

// closeExecutors closes each executor that holds resources.
func closeExecutors(execs []executors.Executor, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, e := range execs {
		if c, ok := e.(executors.Closer); ok {
			if err := c.Close(ctx); err != nil {
				log.Warn("release an executor after a failed start", "executor", e.Kind(), "err", err)
			}
		}
	}
}

// subprocessConfig is the subprocess executor's Config for the gateway's
// section. Zero fields stay zero: the package's defaults apply.
func subprocessConfig(sp SubprocessConfig, log *slog.Logger) subprocess.Config {
	return subprocess.Config{
		Limits: executors.Limits{MemoryMB: sp.MemoryMB, CPUSeconds: sp.CPUSeconds, MaxProcs: sp.MaxProcs,
			MaxOutputBytes: sp.MaxOutputKiB << 10},
		WarmMax: sp.WarmMax, DisableWarm: sp.WarmMax <= 0, DisableZygote: !sp.Zygotes, ZygotePool: sp.ZygotePool,
		RootDir: sp.RootDir, TmpMB: sp.TmpMB, Logger: log,
	}
}

// dockerConfig is the docker executor's Config for the gateway's section
// (executors.docker, and executors.gvisor, which gvisor.New completes).
// Zero fields stay zero: the package's defaults apply.
func dockerConfig(d DockerConfig, log *slog.Logger) docker.Config {
	var images map[string]string
	if d.Image != "" {
		images = map[string]string{}
		for _, lang := range []string{executors.LangPython, executors.LangBash, executors.LangJavaScript} {
			images[lang] = d.Image
		}
	}
	return docker.Config{
		Host: d.Host, Images: images, CPUs: d.CPUs, TmpfsMB: d.TmpfsMB, Runtime: d.Runtime, Instance: d.Instance, Logger: log,
		WarmMax: d.WarmMax, WarmPerSession: d.WarmPerSession, WarmIdle: d.WarmIdle,
		Limits: executors.Limits{MemoryMB: d.MemoryMB, MaxProcs: d.MaxProcs}, Pool: d.Pool,
	}
}

// withSnapshots keeps a container executor's checkpoints of paused
// sessions in the data directory, which survives a restart as the
// sessions' records do.
func (gw *gateway) withSnapshots(c docker.Config) docker.Config {
	c.SnapshotDir = filepath.Join(gw.cfg.DataDir, "snapshots")
	return c
}

// aioPool starts the AIO pool. A pool that cannot start (no root for its
// mounts, say) is left out with an error in the log: requests the policy
// routes to aio then get 503 executor_unavailable, never another executor.
func (gw *gateway) aioPool(ctx context.Context, pc aio.PoolConfig, ws *workspace.Workspaces) *aio.Executor {
	if pc.StateDir == "" {
		pc.StateDir = filepath.Join(gw.cfg.DataDir, "aio")
	}
	pc.Logger = gw.log
	pc.Workspaces = func(ctx context.Context, sessionID string) (aio.Workspace, error) {
		d, err := ws.Ensure(ctx, sessionID)
		return aio.Workspace{Dir: d.Path, UID: d.UID, GID: d.GID}, err
	}
	e, err := aio.New(ctx, pc)
	if err != nil {
		gw.log.Error("aio pool not started; aio-routed requests will get 503", "err", err)
		return nil
	}
	gw.aio = e
	return e
}

// browsers builds the browser router; the aio backend uses the pool's
// sandbox browsers when the pool runs.
func (gw *gateway) browsers(ws *workspace.Workspaces) error {
	b := gw.cfg.Browser
	if !b.Enabled {
		return nil
	}
	deps := browser.Deps{Policy: gw.policy, Audit: gw.audit, Workspaces: ws, Logger: gw.log}
	if gw.aio != nil {
		deps.AIO = gw.aio
	}
	m, err := browser.New(browser.Config{
		ChromiumPath: b.ChromiumPath, AllowHosts: b.AllowHosts, Mode: gw.cfg.Mode,
		IdleTTL: b.IdleTTL, MaxBrowsers: b.MaxBrowsers, DataDir: filepath.Join(gw.cfg.DataDir, "browser"),
	}, deps)
	if err != nil {
		return fmt.Errorf("browser: %w", err)
	}
	gw.browser = m
	return nil
}

// egressProxy builds the egress proxy when it is enabled, and has every
// policy reload re-decide its open tunnels.
func (gw *gateway) egressProxy(confirmer confirm.Service, reg prometheus.Registerer, getenv func(string) string) error {
	e := gw.cfg.Egress
	if !e.Enabled {
		return nil
	}
	creds := make([]egress.Credential, 0, len(e.Credentials))
	for _, c := range e.Credentials {
		v := c.Value
		if c.ValueEnv != "" {
			if v = getenv(c.ValueEnv); v == "" {
				return fmt.Errorf("egress credential for %s: environment variable %s is empty", c.Host, c.ValueEnv)
			}
		}
		creds = append(creds, egress.Credential{Host: c.Host, Header: c.Header, Value: v, Methods: c.Methods, PathPrefix: c.PathPrefix})
	}
	// A refusal names the session's proposal endpoint when the gateway
	// takes proposals (the approval hub's).
	proposalEndpoint := ""
	if gw.hub != nil && gw.hub.Proposals() != nil {
		proposalEndpoint = "/v1/sessions/{session}/proposals"
	}
	hosts := map[string][]netip.Addr{}
	for name, addrs := range e.Hosts {
		for _, a := range addrs {
			hosts[strings.ToLower(name)] = append(hosts[strings.ToLower(name)], netip.MustParseAddr(a).Unmap()) // validated
		}
	}
	svc, err := egress.New(egress.Config{
		Mode: gw.cfg.Mode, HandshakeTimeout: e.HandshakeTimeout, ApprovalTimeout: gw.cfg.Approval.Timeout,
		MaxTunnelsPerSession: e.MaxTunnelsPerSession, TLSPorts: e.TLSPorts, Credentials: creds,
		CADir: filepath.Join(gw.cfg.DataDir, "egress"), ProposalEndpoint: proposalEndpoint,
		UpgradeProtocols: e.UpgradeProtocols,
	}, egress.Deps{
		Policy: gw.policy, Confirm: confirmer, Audit: egressEvents{gw.audit, gw.events}, Metrics: egress.NewMetrics(reg), Logger: gw.log,
		Resolver: egress.StaticResolver(hosts, net.DefaultResolver),
	})
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	gw.policy.OnReload(func(string) { svc.Reloaded(context.Background()) })
	if gw.hub != nil && gw.hub.Proposals() != nil {
		// A revoked or expired proposal's tunnels close like a reload's.
		gw.hub.Proposals().OnOverlay(svc.Reloaded)
	}
	gw.egress = svc
	return nil
}

// endSessionApprovals revokes what session key held in the approval hub.
func (gw *gateway) endSessionApprovals(ctx context.Context, key string) error {
	tenant, id := workspace.SplitKey(key)
	gw.hub.Activity().Forget(tenant, id)
	var errs []error
	if g := gw.hub.Grants(); g != nil {
		errs = append(errs, g.EndSession(ctx, tenant, id))
	}
	if p := gw.hub.Proposals(); p != nil {
		errs = append(errs, p.EndSession(ctx, tenant, id))
	}
	return errors.Join(errs...)
}

// resources are the per-session state DELETE /v1/sessions/{id} releases and
// GET shows besides the executors.
func (gw *gateway) resources() []manager.SessionResource {
	var out []manager.SessionResource
	if gw.deerflow != nil {
		// Deleting or expiring a session kills its DeerFlow sandbox URLs;
		// a shutdown leaves them, in the store.
		out = append(out, manager.SessionResource{Name: "deerflow", Durable: true, Release: gw.deerflow.Release})
	}
	if gw.e2b != nil {
		// Deleting or expiring a session kills its E2B sandbox's tokens
		// and live commands; a shutdown leaves its record, in the store.
		out = append(out, manager.SessionResource{Name: "e2b", Durable: true, Release: gw.e2b.Release})
	}
	if gw.egress != nil {
		// A deleted session's "allow for this session" answers go with it.
		out = append(out, manager.SessionResource{Name: "egress", Release: func(_ context.Context, key string) error {
			gw.egress.ForgetSession(key)
			return nil
		}})
	}
	if gw.hub != nil {
		// A deleted or expired session's grants and accepted proposals go
		// with it: a later session of the same name starts with none. A
		// shutdown keeps them (Durable), as it keeps the session.
		out = append(out, manager.SessionResource{Name: "grants", Durable: true, Release: gw.endSessionApprovals})
	}
	if gw.aio != nil {
		out = append(out, manager.SessionResource{Name: "aio", Describe: func(id string) (any, bool) {
			return gw.aio.InstanceInfo(id)
		}})
	}
	if gw.browser != nil {
		out = append(out, manager.SessionResource{Name: "browser", Release: gw.browser.ReleaseSession,
			Describe: func(id string) (any, bool) {
				backend, ok := gw.browser.Live()[id]
				return backend, ok
			}})
	}
	return out
}

// mcpFleet forwards MCP tool calls to the replica serving their session
// (postgres); nil on sqlite. The interface is nil, not a nil pointer.
func (gw *gateway) mcpFleet() mcp.Fleet {
	if gw.router == nil {
		return nil
	}
	return gw.router
}

// deerflowServer builds the AIO/DeerFlow front end on the manager and the
// sandbox registry, or returns nil (no routes) when it is disabled. The
// interface is nil, not a nil pointer, so api leaves /deerflow unmounted.
func (gw *gateway) deerflowServer(runAudit audit.Store) (api.DeerFlowServer, error) {
	if gw.deerflow == nil {
		return nil, nil
	}
	deps := deerflow.Deps{Manager: gw.manager, Registry: gw.deerflow, Audit: runAudit, Logger: gw.log}
	if gw.router != nil { // a nil *Router in the interface would not read as "one process"
		deps.Fleet = gw.router
	}
	return deerflow.New(deerflow.Config{PublicURL: gw.cfg.DeerFlow.PublicURL}, deps)
}

// e2bServer builds the E2B front end on the manager and the sandbox
// registry, or returns nil (no routes) when it is disabled. The interface
// is nil, not a nil pointer, so api leaves /e2b unmounted.
func (gw *gateway) e2bServer() (api.E2BServer, error) {
	if gw.e2b == nil {
		return nil, nil
	}
	deps := e2b.Deps{Manager: gw.manager, Registry: gw.e2b, Logger: gw.log}
	if gw.router != nil { // a nil *Router in the interface would not read as "one process"
		deps.Fleet = gw.router
	}
	return e2b.New(e2b.Config{}, deps)
}

// daytonaServer builds the Daytona front end on the manager, or returns
// nil (no routes) when it is disabled. The interface is nil, not a nil
// pointer, so api leaves /daytona unmounted.
func (gw *gateway) daytonaServer() (api.DaytonaServer, error) {
	if !gw.cfg.Daytona.Enabled {
		return nil, nil
	}
	deps := daytona.Deps{Manager: gw.manager, Logger: gw.log}
	if gw.router != nil { // a nil *Router in the interface would not read as "one process"
		deps.Fleet = gw.router
	}
	return daytona.New(daytona.Config{PublicURL: gw.cfg.Daytona.PublicURL}, deps)
}

// mcpServer builds the MCP endpoint on the manager and the browser router,
// or returns nil (no route) when it is disabled. The interface is nil, not
// a nil pointer, so api leaves /mcp unmounted.
func (gw *gateway) mcpServer() (api.MCPServer, error) {
	m := gw.cfg.MCP
	if !m.Enabled {
		return nil, nil
	}
	s, err := mcp.New(mcp.Config{
		PublicURL: m.PublicURL, AllowedHosts: m.AllowedHosts, AllowedOrigins: m.AllowedOrigins,
		SessionTimeout: m.SessionTimeout, ProgressInterval: m.ProgressInterval, PurgeOnClose: m.PurgeOnClose,
	}, mcp.Deps{Manager: gw.manager, Browser: gw.browser, Logger: gw.log, Fleet: gw.mcpFleet()})
	if err != nil {
		return nil, err
	}
	gw.mcp = s
	return s, nil
}

// confirmer is the approval hub behind the web page, or AutoApprove when it
// is configured (PERMISSIVE only, as Validate and NewAutoApprove both
// check).
func (gw *gateway) confirmer(ctx context.Context, getenv func(string) string) (confirm.Service, error) {
	if gw.cfg.Approval.AutoApprove {
		return confirm.NewAutoApprove(gw.cfg.Mode)
	}
	pageURL := gw.cfg.Approval.PageURL
	if pageURL == "" {
		pageURL = "http://" + gw.cfg.Listen
	}
	channels, err := approvalChannels(gw.cfg.Approval, pageURL, getenv, gw.audit, gw.log)
	if err != nil {
		return nil, err
	}
	// Grants (approve "for this session" or "for this pattern" for a
	// while) are on with the hub: the policy decides what they cover.
	grants, err := confirm.OpenGrants(ctx, confirm.GrantOptions{Store: gw.audit, Audit: gw.audit, Logger: gw.log,
		Policy: confirm.EngineGrants(gw.policy, gw.cfg.Mode)})
	if err != nil {
		return nil, fmt.Errorf("approval grants: %w", err)
	}
	// Agents' proposals (POST /v1/sessions/{id}/proposals): accepted
	// ones are overlays on the policy's egress data, kept in force here.
	proposals, err := confirm.OpenProposals(ctx, confirm.ProposalOptions{Store: gw.audit, Audit: gw.audit, Policy: gw.policy,
		Mode: gw.cfg.Mode, Logger: gw.log, Grants: grants, Executors: gw.executorStates})
	if err != nil {
		return nil, fmt.Errorf("approval proposals: %w", err)
	}
	hub, err := confirm.NewHub(ctx, confirm.HubOptions{
		Store: gw.audit, Timeout: gw.cfg.Approval.Timeout, Logger: gw.log,
		AllowedOrigins: gw.cfg.Approval.AllowedOrigins, Replica: replicaName(gw.cfg.Storage),
		ListenDSN: gw.listenDSN(), Peer: gw.approvalPeer(), Channels: channels, Grants: grants, Proposals: proposals,
	})
	if err != nil {
		return nil, fmt.Errorf("approval hub: %w", err)
	}
	gw.hub = hub
	return hub, nil
}

// tokens returns the configured tokens, or generates one per role when none
// are configured, which is only allowed on a loopback address.
func (gw *gateway) tokens() ([]api.Token, error) {
	var out []api.Token
	for _, t := range gw.cfg.Auth.Tokens {
		role, err := api.ParseRole(t.Role)
		if err != nil {
			return nil, err
		}
		sum, err := api.ParseSecret(t.Token)
		if err != nil {
			return nil, fmt.Errorf("token %s: %w", t.Name, err)
		}
		tok := api.NewHashedToken(t.Name, role, sum)
		tok.Tenant, tok.Tenants = t.tenant(), t.Tenants
		out = append(out, tok)
	}
	if len(out) > 0 || gw.cfg.Auth.JWT.Enabled() {
		return out, nil
	}
	if !IsLoopback(gw.cfg.Listen) {
		return nil, fmt.Errorf("refusing to listen on %s without configured tokens: set auth.tokens, auth.jwt or SANDGATE_*_TOKEN, or listen on loopback", gw.cfg.Listen)
	}
	gw.secrets = map[api.Role]string{}
	for _, role := range []api.Role{api.RoleAgent, api.RoleApprover, api.RoleAdmin} {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		secret := "sg_" + string(role) + "_" + base64.RawURLEncoding.EncodeToString(b[:])
		gw.secrets[role] = secret
		out = append(out, api.NewToken("generated-"+string(role), role, secret))
	}
	return out, nil
}

// auth is the authenticator: the tokens and, when auth.jwt is set, a JWT
// verifier whose tenant claims must be valid tenant names.
func (gw *gateway) auth(ctx context.Context, tokens []api.Token) (*api.Auth, error) {
	j := gw.cfg.Auth.JWT
	if !j.Enabled() {
		return api.NewAuth(tokens)
	}
	var keys api.KeySource
	if j.JWKSFile != "" {
		f, err := api.NewJWKSFile(ctx, j.JWKSFile)
		if err != nil {
			return nil, err
		}
		keys = f
	} else {
		keys = api.NewJWKSURL(j.JWKSURL, api.JWKSURLOptions{Refresh: j.Refresh})
		if _, err := keys.Keys(ctx, false); err != nil {
			// JWTs are refused until the keys can be fetched; static tokens
			// work meanwhile.
			gw.log.Warn("JWKS not fetched yet; JWTs are refused until it is", "url", j.JWKSURL, "err", err)
		}
	}
	v, err := api.NewJWTVerifier(api.JWTConfig{
		Audience: j.Audience, Issuer: j.Issuer, Keys: keys, Leeway: j.Leeway,
		TenantClaim: j.Claims.Tenant, RoleClaim: j.Claims.Role, NameClaim: j.Claims.Name, TenantsClaim: j.Claims.Tenants,
		ValidTenant: workspace.ValidateTenant,
	})
	if err != nil {
		return nil, err
	}
	return api.NewAuth(tokens, api.WithJWT(v))
}

func (gw *gateway) listen(handler http.Handler) error {
	ln, err := net.Listen("tcp", gw.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if gw.secrets != nil && !IsLoopback(ln.Addr().String()) {
		ln.Close()
		return errors.New("refusing a non-loopback listener without configured tokens")
	}
	gw.listener = ln
	baseCtx, cancel := context.WithCancel(context.Background())
	gw.baseCancel = cancel
	s := gw.cfg.Server
	gw.server = &http.Server{
		Handler: handler, ReadHeaderTimeout: s.ReadHeaderTimeout, ReadTimeout: s.ReadTimeout,
		WriteTimeout: s.WriteTimeout, IdleTimeout: s.IdleTimeout, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return baseCtx },
		ErrorLog:    slog.NewLogLogger(gw.log.Handler(), slog.LevelWarn),
	}
	return nil
}

// Addr is the bound address (useful with port 0).
func (gw *gateway) Addr() string { return gw.listener.Addr().String() }

// runAudit is the audit store of the manager and the API. On SQLite (one
// replica) it is gw.audit wrapped in audit.Later: a run's outcome is
// committed just after its answer, and a query waits for what was queued
// before it. On PostgreSQL a fleet's replicas share the log, and a client
// may read it through another replica right after its answer, where no
// queue could be waited for: completions stay synchronous there.
func (gw *gateway) runAudit(metrics *manager.Metrics) audit.Database {
	if gw.audit.Driver() != audit.DriverSQLite {
		return gw.audit
	}
	gw.later = audit.NewLater(gw.audit, gw.log, metrics.AuditFailed)
	return gw.later
}

func (gw *gateway) closeStores() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	gw.leaveFleet(ctx)
	cancel()
	if gw.later != nil {
		gw.later.Drain()
	}
	// After the last decision: OPA's plugins upload the decision logs
	// they still buffer and the last status report.
	gw.closePolicy()
	if gw.events != nil {
		_ = gw.events.Close()
	}
	if gw.audit != nil {
		_ = gw.audit.Close()
	}
}

// banner prints where to reach the gateway and, when they were generated,
// the tokens. It writes to stdout, never to the log.
func (gw *gateway) banner() {
	base := "http://" + gw.Addr()
	fmt.Fprintf(gw.stdout, "sandgate listening on %s (mode %s)\n", base, gw.cfg.Mode)
	if gw.mcp != nil {
		fmt.Fprintf(gw.stdout, "mcp endpoint: %s%s (streamable HTTP; agent token as bearer)\n", base, mcp.Path)
	}
	if gw.secrets == nil {
		return
	}
	fmt.Fprintln(gw.stdout, "no tokens configured; generated for this run only:")
	for _, role := range []api.Role{api.RoleAgent, api.RoleApprover, api.RoleAdmin} {
		fmt.Fprintf(gw.stdout, "  %-9s %s\n", role, gw.secrets[role])
	}
	fmt.Fprintf(gw.stdout, "approval page: %s/?token=%s\n", base, gw.secrets[api.RoleApprover])
}

// serve runs until ctx is done, then shuts down: stop accepting, let
// running requests finish up to the shutdown timeout, cancel the rest (which
// kills their process trees), release executors and close the audit store.
func (gw *gateway) serve(ctx context.Context) error {
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		if err := gw.policy.Watch(watchCtx, gw.cfg.Policy.WatchPoll); err != nil {
			gw.log.Error("policy watch stopped", "err", err)
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- gw.server.Serve(gw.listener) }()
	gw.banner()
	gw.log.Info("gateway started", "addr", gw.Addr(), "mode", gw.cfg.Mode, "policy_revision", gw.policy.Revision())
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	gw.shutdown()
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// releaseTimeout bounds a shutdown's release of what the sessions and
// executors hold (containers, pods, aio instances and their mounts), after
// the requests have ended. What is not removed by then stays for the next
// start to adopt or reap; 20 s leaves a busy engine time to remove a few
// dozen containers, within the minute a service manager usually grants.
const releaseTimeout = 20 * time.Second

func (gw *gateway) shutdown() {
	gw.log.Info("shutting down", "timeout", gw.cfg.Server.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), gw.cfg.Server.ShutdownTimeout)
	defer cancel()
	// Leave the fleet first: the other replicas stop forwarding here and
	// adopt this replica's sessions at their next request, while the
	// requests already here finish.
	gw.leaveFleet(sctx)
	// Requests waiting for a human would hold the shutdown to its deadline:
	// the hub resolves them as interrupted (a deny) and closes every socket.
	if gw.hub != nil {
		if err := gw.hub.Close(sctx); err != nil {
			gw.log.Warn("approval hub close", "err", err)
		}
		if p := gw.hub.Proposals(); p != nil {
			p.Close()
		}
	}
	// MCP sessions hold streams open that Shutdown would wait for: once
	// Shutdown has stopped the listener, the server lets its tool calls
	// finish (up to the deadline) and then closes its sessions.
	if gw.mcp != nil {
		var once sync.Once // Shutdown is called twice below
		gw.server.RegisterOnShutdown(func() {
			once.Do(func() {
				if err := gw.mcp.Close(sctx); err != nil {
					gw.log.Warn("mcp close", "err", err)
				}
			})
		})
	}
	if err := gw.server.Shutdown(sctx); err != nil {
		gw.log.Warn("shutdown deadline passed; cancelling running requests", "err", err)
	}
	gw.baseCancel()
	// Cancelled requests return quickly (their executors kill the process
	// trees); wait for them so their audit records are written before the
	// store closes.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if err := gw.server.Shutdown(dctx); err != nil {
		_ = gw.server.Close()
	}
	cctx, ccancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer ccancel()
	if gw.browser != nil {
		if err := gw.browser.Close(cctx); err != nil {
			gw.log.Warn("browser close", "err", err)
		}
	}
	if err := gw.manager.Close(cctx); err != nil {
		gw.log.Warn("executor close", "err", err)
	}
	gw.closeStores()
	gw.log.Info("stopped")
}
