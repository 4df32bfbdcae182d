// Package e2b is the E2B front end (issue 28, DESIGN.md §14): the wire
// protocols of the unmodified E2B SDKs (npm e2b and
// @e2b/code-interpreter, and the Python SDKs, which speak the same) over
// the manager's sessions, beside the REST (api), MCP (mcp) and DeerFlow
// (deerflow) front ends, mounted by api on the gateway's listener under
// /e2b. A framework that uses E2B changes its environment, not its code:
//
//	E2B_API_URL=http://<gateway>/e2b
//	E2B_SANDBOX_URL=http://<gateway>/e2b
//	E2B_API_KEY=<an agent token of the gateway>
//
// Every call then passes sandgate's pipeline: commands.run and runCode
// are manager.Run (risk, policy, approval, the executor the policy
// chooses, audit), the file calls are the manager's file operations, and
// the approver sees "via E2B SDK (e2b-js 2.51.0)".
//
// A sandbox is one sandbox for its life, as E2B users expect: Layout
// declares SessionSandbox, so the policy sends its commands to an
// executor with the session_sandbox capability, where they all run in
// one long-lived sandbox of the session (docker and gVisor: one
// container, each command an exec in it, executors/docker/session.go):
// processes, /tmp and what was installed persist from one command to the
// next. runCode's cells run in the session's kernel, a sandbox of its own.
//
// What is served (research/e2b-compat.md has the wire format, observed
// from the SDKs; no E2B code or .proto file is in this repository):
//
//   - the control plane (control.go): create (POST /sandboxes and
//     /v2/sandboxes), list, get, connect, kill, setTimeout and metrics
//     (metrics.go), in E2B's JSON and error shapes. A sandbox is a
//     session of the key's tenant, its id the session's id, created with front end "e2b" and a TTL (E2B's
//     timeout, 300 s by default); kill deletes the session and its
//     workspace. Templates maps template names to runtimes; another name
//     is a 400;
//   - envd's Connect services in the JSON codec (connect.go):
//     process.Process Start, Connect, List, SendSignal, SendInput and
//     CloseStdin (process.go; every process a detached run of the
//     manager that outlives its stream, detached.go) and
//     filesystem.Filesystem Stat, ListDir, MakeDir, Move, Remove
//     (filesystem.go); and envd's /files and /health (files.go);
//   - the code interpreter's /execute and /contexts (interpreter.go).
//
// One listener serves every sandbox: with E2B_SANDBOX_URL set, the SDKs
// name the sandbox in E2b-Sandbox-Id and its port (49983 envd, 49999 the
// interpreter) in E2b-Sandbox-Port, and keep the URL's path prefix.
//
// # Keys and tokens (fail closed)
//
// The API key is an agent token of the gateway (auth.tokens, the
// SANDGATE_AGENT_TOKEN of a dev start, or a JWT), sent in X-API-Key; api
// authenticates it as it authenticates a bearer token and hands the
// caller on with manager.WithPrincipal. So an E2B key is a sandgate agent
// principal: its name, role and tenant. Only the agent role is accepted
// (an approver or admin token is 403), and there is no other key. E2B
// SDKs from about 2.27 to 2.45 check client-side that a key looks like
// e2b_<hex>: for them, configure the agent token's secret in that form
// (for example `token: e2b_$(openssl rand -hex 20)`), which is just a
// token; 2.51.0 no longer checks.
//
// Create and connect return two per-sandbox tokens, random 260-bit
// values: envd's access token (X-Access-Token, on every envd call and on
// /execute) and the traffic token (E2B-Traffic-Access-Token, the only one
// the SDK sends on /contexts). A sandbox request without its token is
// 401; one for a sandbox that is gone is 502 ("not running"). The
// store keeps only their SHA-256 (Registry, the e2b_sandboxes table of
// the gateway's database, SQLite or a fleet's PostgreSQL), with the rest
// of the sandbox's record: they die with the sandbox's session (kill,
// expiry, or DELETE /v1/sessions/{id}, through the manager's session
// resource hook) and survive a restart. The replica that minted them
// shows them again to connect and getInfo; one that did not (after a
// restart or a failover) mints new ones on connect, which replace the old
// everywhere at once. Create and connect answer the domain
// "sandgate.invalid", which cannot resolve: a client that forgot
// E2B_SANDBOX_URL fails instead of sending its commands and files to
// E2B's public hosts.
//
// # Approvals and the SDK's timeouts
//
// A command's stream starts at once with its start event (its pid), and
// carries a keepalive every Config.Keepalive while the policy decides, a
// human approves, or the command is quiet; a held cell's /execute
// answers its headers at once and sends keepalive lines. What still bounds
// a held call is the SDK's own total budget: commands.run's timeoutMs and
// runCode's timeoutMs, 60 s by default, count the wait for approval.
// Raise them for approvals that take longer (commands.run(cmd,
// {timeoutMs: 0}) removes it; the gateway's approval.timeout still
// applies).
//
// # A refusal
//
// A command sandgate refuses (policy, approval denied or timed out,
// validation, quota) ends with exit code 126, its reason on stderr and
// in the end event's error, so commands.run raises the SDK's own
// CommandExitError whose message is sandgate's code, message and the
// policy's reasons. A refused cell answers an execution error named
// after the code (PolicyDenied, ApprovalDenied, ...) with the same text.
//
// # Not served yet
//
// Snapshots (createSnapshot), autoPause at the timeout, watchDir, PTY,
// signed file URLs, getHost port forwarding; getMetrics' history (one
// reading, now, is served, see metrics.go); a process outliving the
// gateway's restart or its replica's death.
//
// # A fleet
//
// On PostgreSQL, a sandbox is one session whichever replica a call
// reaches: its record is in the store, and every call about it (envd's,
// the interpreter's, and its own control-plane calls: get, kill, timeout,
// metrics, connect, pause, fork) is forwarded to the replica serving its
// session, as the REST and DeerFlow routes are. Its processes, their
// output and its code contexts live there, one copy fleet-wide. When that
// replica dies, the next call adopts the session elsewhere: the
// workspace and the record survive, the tokens keep working; the
// background commands are gone (connect(pid) is not_found) and the next
// cell's kernel is new.
//
// # Pause, resume and fork
//
// Sandbox.pause (betaPause) is the session's pause (issue 30): its
// containers and processes are freed, background commands killed; a
// paused sandbox lists as "paused", and Sandbox.connect resumes it (a
// gVisor kernel with its memory, elsewhere the workspace). A second pause
// answers 409, which the SDK reads as false. Sandbox.fork is the
// session's fork: count new sandboxes, each with its own tokens and a
// copy of the workspace (and, under gVisor, the kernel's memory).
package e2b
