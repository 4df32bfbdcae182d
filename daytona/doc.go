// Package daytona is the Daytona front end (issue 28, DESIGN.md §14): the
// part of Daytona's API and of its sandbox toolbox that the unmodified
// Daytona SDK's quickstart uses (npm @daytonaio/sdk 0.218.0), over the
// manager's sessions, beside the REST (api), MCP (mcp), DeerFlow
// (deerflow) and E2B (e2b) front ends, mounted by api on the gateway's
// listener under /daytona. A program that uses Daytona changes its
// configuration, not its code:
//
//	new Daytona({ apiUrl: "http://<gateway>/daytona", apiKey: "<an agent token>" })
//	(or DAYTONA_API_URL and DAYTONA_API_KEY)
//
// Every call then passes sandgate's pipeline: process.executeCommand and
// process.codeRun are manager.Run (risk, policy, approval, the executor the
// policy chooses, audit), the file calls are the manager's file
// operations, and the approver sees "via Daytona SDK (sdk-typescript
// 0.218.0)", as the SDK names itself in X-Daytona-Source and
// X-Daytona-SDK-Version.
//
// What is served (research/e2b-compat.md §7 has the wire format, observed
// from the SDK; no Daytona code is in this repository):
//
//   - the sandbox API (sandbox.go): create (POST /sandbox), get, list,
//     delete and the toolbox URL. A sandbox is a session of the key's
//     tenant, its id the session's id (create's name, when given), created
//     with front end "daytona", started at once. Its autoStopInterval
//     (minutes, 15 by default, 0 never) is the session's idle timeout and
//     its ttlMinutes the session's TTL; delete deletes the session and its
//     workspace. Options sandgate does not serve (snapshots and images,
//     resources, volumes, network settings, public, sandbox-wide env) are
//     refused with a 400 naming the field;
//   - the toolbox (process.go, files.go), at the toolboxProxyUrl a sandbox
//     names, <gateway>/daytona/toolbox, under which the SDK puts the
//     sandbox id: process/execute, process/code-run, files (list, delete,
//     info, download, bulk-upload, bulk-download, folder), user-home-dir
//     and work-dir. Paths are the session's workspace (paths.go).
//
// # Keys (fail closed)
//
// The SDK sends its API key as `Authorization: Bearer <key>` on every
// call, the toolbox's included. The key is an agent token of the gateway
// (auth.tokens, the SANDGATE_AGENT_TOKEN of a dev start, or a JWT): api
// authenticates it on every route and hands the caller on with
// manager.WithPrincipal, so a Daytona key is a sandgate agent principal,
// its name, role and tenant (the sandbox's organizationId). Only the agent
// role is accepted (an approver or admin token is 403), there is no other
// credential, and a toolbox call reaches only a live Daytona sandbox of the
// key's tenant (anything else is 404): no per-sandbox token to leak, and
// nothing is created by a toolbox call. The toolbox URL is the configured
// public URL (daytona.public_url) or the one the request came by.
//
// # Approvals and refusals
//
// executeCommand and codeRun do not stream: the answer comes when the run
// ends, and the SDK waits for it 24 hours by default, so a command held
// for approval simply waits, within the gateway's approval.timeout. (A
// program that sets the client's requestTimeoutMs and a command timeout
// bounds the wait by that timeout plus a few seconds.) A refusal (policy,
// approval denied or timed out, validation, quota) is an HTTP error in
// Daytona's shape, {statusCode, message, code}, which the SDK raises as its
// own error class for the status (403: DaytonaAuthorizationError, a
// DaytonaForbiddenError), with sandgate's code as the error's code and
// the message "policy_denied: ...: <the policy's reasons> (request <id>)".
//
// # Not served
//
// Sessions and PTYs of the process API, the code interpreter's
// process/interpreter, git, LSP, computer use, preview URLs, snapshots,
// stop/start/archive (a sandgate sandbox is never stopped, only ended),
// signed file URLs, and Daytona's socket.io event stream (the SDK falls
// back to polling; DAYTONA_USE_DEPRECATED_POLLING=true or
// useDeprecatedPolling spares it the attempt).
//
// # A fleet
//
// A Daytona sandbox keeps nothing outside its session, whose record is
// in the store: on PostgreSQL any replica answers get and list, and its
// toolbox calls and its delete are forwarded to the replica serving the
// session (Fleet), where its processes and kernel are.
package daytona
