package api

import (
	"net/http"

	"github.com/sandgate/sandgate/confirm"
	"github.com/sandgate/sandgate/manager"
	"github.com/sandgate/sandgate/policy"
)

// Error statuses the operations document, by family.
var (
	errsRun      = []int{400, 401, 403, 404, 413, 429, 499, 500, 503}
	errsFile     = []int{400, 401, 403, 404, 409, 413, 422, 429, 499, 500}
	errsSession  = []int{400, 401, 403, 404, 429, 500}
	errsAdmin    = []int{400, 401, 403, 500}
	errsApproval = []int{400, 401, 403, 404, 500}
	errsDF       = []int{400, 401, 403, 404, 409, 413, 429, 500}
	errsAIORun   = []int{400, 403, 404, 413, 429, 499, 500, 503}
	errsAIOFile  = []int{400, 403, 404, 413, 429, 499, 500}
)

var (
	rolesAgent      = []Role{RoleAgent}
	rolesAgentAdmin = []Role{RoleAgent, RoleAdmin}
	rolesAdmin      = []Role{RoleAdmin}
	rolesApprovers  = []Role{RoleApprover, RoleAdmin}
)

func q(name, typ, desc string) param { return param{name: name, typ: typ, desc: desc} }

func qreq(name, typ, desc string) param {
	return param{name: name, typ: typ, desc: desc, required: true}
}

// operations is every operation the server registers. Adding a route
// without its entry here fails TestOpenAPIMatchesRoutes.
func operations() []op {
	out := append(coreOperations(), fileOperations()...)
	out = append(out, approvalOperations()...)
	out = append(out, grantOperations()...)
	out = append(out, auditOperations()...)
	out = append(out, pauseOperations()...)
	out = append(out, proposalOperations()...)
	out = append(out, mcpOperations()...)
	out = append(out, deerflowOperations()...)
	return append(out, aioOperations()...)
}

func coreOperations() []op {
	return []op{
		{method: "POST", path: "/v1/sessions/{id}/run_code", id: "runCode", tag: "execution", roles: rolesAgent,
			summary: "Run code through the pipeline (risk, policy, approval, executor, audit)",
			body:    sch("RunCodeRequest", runCodeBody{}), ok: 200, okBody: sch("RunCodeResponse", runCodeResponse{}),
			stream: true, errs: errsRun},
		{method: "POST", path: "/v1/sessions/{id}/execute", id: "execute", tag: "execution", roles: rolesAgent,
			summary: "Run a shell command (deepagents' execute contract)",
			body:    sch("ExecuteRequest", executeBody{}), ok: 200, okBody: sch("ExecuteResponse", executeResponse{}),
			stream: true, errs: errsRun},
		{method: "POST", path: "/v1/sessions/{id}/kernel/restart", id: "restartKernel", tag: "execution", roles: rolesAgent,
			summary: "Replace the session's kernel (stateful runs) with a fresh one; its variables are gone",
			ok:      200, okBody: sch("KernelRestartResponse", kernelRestartResponse{}), errs: errsSession},
		{method: "POST", path: "/v1/policy/evaluate", id: "evaluate", tag: "policy", roles: rolesAgentAdmin,
			summary: "Dry run: the risk and the decision for a would-be request; nothing runs",
			body:    sch("EvaluateRequest", evaluateBody{}), ok: 200, okBody: sch("EvaluateResponse", evaluateResponse{}), errs: errsSession},
		{method: "POST", path: "/v1/sessions/{id}/browser", id: "browserAction", tag: "browser", roles: rolesAgent,
			summary: "One browser action in the session's browser",
			body:    sch("BrowserRequest", browserBody{}), ok: 200, okBody: sch("BrowserResponse", browserResponse{}),
			errs: []int{400, 401, 403, 404, 413, 429, 499, 500, 502, 503, 504}},
		{method: "GET", path: "/v1/sessions", id: "listSessions", tag: "sessions", roles: rolesAgentAdmin,
			summary: "The caller's sessions (an admin's: any tenant's)",
			query: []param{q("tenant", "string", "an admin's tenant filter"), q("cursor", "string", "next_cursor of the previous page"),
				q("limit", "integer", "page size (default 100)"), q("label", "string", "key=value; repeat to require several")},
			ok: 200, okBody: sch("SessionPage", manager.SessionPage{}), errs: errsSession},
		{method: "GET", path: "/v1/events", id: "streamEvents", tag: "events", roles: rolesAgentAdmin,
			summary: "Lifecycle events (session.*, run.*, approval.*, egress.denied) as server-sent events; resumable with Last-Event-ID",
			query:   []param{q("tenant", "string", "an admin's tenant filter"), q("last_event_id", "integer", "resume after this event")},
			ok:      200, okMedia: "text/event-stream", errs: []int{400, 401, 403, 404, 429}},
		{method: "GET", path: "/v1/events/deliveries", id: "listDeliveries", tag: "events", roles: rolesAdmin,
			summary: "The webhook delivery log: endpoint, event, webhook-id, attempts, last status and error",
			query: []param{q("tenant", "string", "endpoints of one tenant"), q("endpoint", "string", "an endpoint id or URL"),
				q("event_id", "integer", "one event's deliveries"), q("pending", "boolean", "only those not delivered yet"),
				q("limit", "integer", "page size")},
			ok: 200, okMedia: "application/json", errs: []int{400, 401, 403, 404}},
		{method: "POST", path: "/v1/sessions", id: "createSession", tag: "sessions", roles: rolesAgent,
			summary: "Create a session with labels, metadata and timeouts (a first run also creates one)",
			body:    sch("CreateSessionRequest", createSessionBody{}), ok: 201, okBody: sch("SessionInfo", manager.SessionInfo{}),
			errs: []int{400, 401, 403, 409, 429, 500, 503}},
		{method: "PATCH", path: "/v1/sessions/{id}", id: "patchSession", tag: "sessions", roles: rolesAgentAdmin,
			summary: "Extend the session's timeout (E2B's setTimeout), set its idle timeout or labels",
			body:    sch("PatchSessionRequest", patchSessionBody{}), ok: 200, okBody: sch("SessionInfo", manager.SessionInfo{}),
			errs: errsSession},
		{method: "GET", path: "/v1/sessions/{id}", id: "getSession", tag: "sessions", roles: rolesAgentAdmin,
			summary: "One session", ok: 200, okBody: sch("SessionInfo", manager.SessionInfo{}), errs: errsSession},
		{method: "DELETE", path: "/v1/sessions/{id}", id: "deleteSession", tag: "sessions", roles: rolesAgentAdmin,
			summary: "Release the session's resources; purge=true also deletes its workspace",
			query:   []param{q("purge", "boolean", "also delete the workspace")}, ok: 204, errs: errsSession},
		{method: "GET", path: "/v1/policy", id: "getPolicy", tag: "policy", roles: rolesAdmin,
			summary: "The policy in force, the mode and the executors", ok: 200, okBody: sch("PolicyStatus", policyView{}), errs: errsAdmin},
		{method: "POST", path: "/v1/policy/reload", id: "reloadPolicy", tag: "policy", roles: rolesAdmin,
			summary: "Reload the policy; a policy that fails to compile is a 400 and the last good one stays; a policy from bundles is a 409 (OPA's bundle plugin polls)",
			ok:      200, okBody: sch("PolicyStatus", policyView{}), errs: []int{400, 401, 403, 409, 500}},
		{method: "GET", path: "/v1/policy/shadow", id: "getShadowPolicy", tag: "policy", roles: rolesAdmin,
			summary: "The shadow policy: evaluations and disagreements with the active one by path, the latest disagreements with their decision_id and input digest; 404 without one",
			ok:      200, okBody: sch("ShadowStatus", policy.ShadowStatus{}), errs: []int{401, 403, 404, 500}},
		{method: "GET", path: "/metrics", id: "metrics", tag: "operations", roles: rolesAdmin,
			summary: "Prometheus metrics", ok: 200, okMedia: "text/plain", errs: errsAdmin},
		{method: "GET", path: "/healthz", id: "healthz", tag: "operations", auth: authNone,
			summary: "Liveness", ok: 200, okBody: sch("Health", healthResponse{})},
		{method: "GET", path: "/readyz", id: "readyz", tag: "operations", auth: authNone,
			summary: "Readiness: policy loaded, executors probed, database answering",
			ok:      200, okBody: sch("Ready", readyResponse{}),
			alt: []altResp{{status: 503, body: sch("Ready", readyResponse{}), desc: "not ready"}}},
		{method: "GET", path: "/v1/openapi.json", id: "openapi", tag: "operations", auth: authNone,
			summary: "This document", ok: 200, okBody: sch("OpenAPIDocument", nil)},
	}
}

func fileOperations() []op {
	path := qreq("path", "string", "workspace path (relative, or under /workspace/)")
	return []op{
		{method: "GET", path: "/v1/sessions/{id}/files/content", id: "getFileContent", tag: "files", roles: rolesAgent,
			summary: "A file's raw bytes", query: []param{path}, ok: 200, okMedia: mediaBinary, errs: errsFile},
		{method: "PUT", path: "/v1/sessions/{id}/files/content", id: "putFileContent", tag: "files", roles: rolesAgent,
			summary: "Write a file's raw bytes (201 when created)",
			query:   []param{path, q("mode", "string", "overwrite (default), create or append")},
			rawBody: true, ok: 200, okBody: sch("FileWriteResponse", fileWriteResponse{}),
			alt: []altResp{{status: 201, body: sch("FileWriteResponse", fileWriteResponse{}), desc: "created"}}, errs: errsFile},
		{method: "GET", path: "/v1/sessions/{id}/files/read", id: "readFile", tag: "files", roles: rolesAgent,
			summary: "Numbered lines of a text file",
			query:   []param{path, q("offset", "integer", "first line, from 0"), q("limit", "integer", "lines (default 2000)")},
			ok:      200, okBody: sch("FileReadResponse", fileReadResponse{}), errs: errsFile},
		{method: "POST", path: "/v1/sessions/{id}/files/edit", id: "editFile", tag: "files", roles: rolesAgent,
			summary: "Replace a string in a file", body: sch("FileEditRequest", editBody{}),
			ok: 200, okBody: sch("FileEditResponse", fileEditResponse{}), errs: errsFile},
		{method: "GET", path: "/v1/sessions/{id}/files/list", id: "listFiles", tag: "files", roles: rolesAgent,
			summary: "List a directory", query: []param{q("path", "string", "default the root"), q("depth", "integer", "levels (default 1)")},
			ok: 200, okBody: sch("FileListResponse", fileListResponse{}), errs: errsFile},
		{method: "GET", path: "/v1/sessions/{id}/files/glob", id: "globFiles", tag: "files", roles: rolesAgent,
			summary: "Entries matching a glob", query: []param{qreq("pattern", "string", "path.Match per segment, ** for any depth"), q("path", "string", "base")},
			ok: 200, okBody: sch("FileListResponse", fileListResponse{}), errs: errsFile},
		{method: "GET", path: "/v1/sessions/{id}/files/grep", id: "grepFiles", tag: "files", roles: rolesAgent,
			summary: "Search files' lines",
			query: []param{qreq("pattern", "string", ""), q("path", "string", ""), q("glob", "string", "file filter"),
				q("literal", "boolean", "default true")},
			ok: 200, okBody: sch("FileGrepResponse", fileGrepResponse{}), errs: errsFile},
		{method: "DELETE", path: "/v1/sessions/{id}/files", id: "deleteFile", tag: "files", roles: rolesAgent,
			summary: "Delete a file (or, recursive=true, a directory)", query: []param{path, q("recursive", "boolean", "")},
			ok: 200, okBody: sch("FileDeleteResponse", fileDeleteResponse{}), errs: errsFile},
	}
}

func approvalOperations() []op {
	return []op{
		{method: "GET", path: "/v1/approvals", id: "listApprovals", tag: "approvals", roles: rolesApprovers,
			summary: "Pending approvals (with their code), or resolved ones",
			query: []param{q("status", "string", "pending (default), resolved, approved, denied, timeout, withdrawn or interrupted"),
				q("limit", "integer", "resolved ones: default 50")},
			ok: 200, okBody: sch("ApprovalList", approvalList{}), errs: errsApproval},
		{method: "GET", path: "/v1/approvals/connections", id: "listConnections", tag: "approvals", roles: rolesApprovers,
			summary: "A session's recent egress connections (the approval page shows them next to its pending requests)",
			query: []param{qreq("session_id", "string", ""), q("tenant", "string", "the session's tenant"),
				q("limit", "integer", "default 20")},
			ok: 200, okBody: sch("ConnectionList", connectionList{}), errs: errsApproval},
		{method: "GET", path: "/v1/approvals/{id}", id: "getApproval", tag: "approvals", roles: rolesApprovers,
			summary: "One approval", ok: 200, okBody: sch("Approval", confirm.View{}), errs: errsApproval},
		{method: "POST", path: "/v1/approvals/{id}/decision", id: "decideApproval", tag: "approvals", roles: rolesApprovers,
			summary: "Approve or deny; the first decision wins", body: sch("DecisionRequest", decisionBody{}),
			ok: 200, okBody: sch("Approval", confirm.View{}),
			alt:  []altResp{{status: 409, body: sch("DecisionConflict", conflictBody{}), desc: "already decided: the final state"}},
			errs: errsApproval},
		{method: "GET", path: "/v1/approvals/ws", id: "approvalSocket", tag: "approvals", roles: rolesApprovers, auth: authSocket,
			summary: "WebSocket: requested/resolved events; the client sends decisions",
			ok:      http.StatusSwitchingProtocols, errs: []int{400, 401, 403, 404}},
		{method: "GET", path: "/", id: "approvalPage", tag: "approvals", auth: authNone,
			summary: "The approval web page", ok: 200, okMedia: "text/html"},
		{method: "GET", path: "/assets/{file}", id: "approvalAsset", tag: "approvals", auth: authNone,
			summary: "The page's assets", ok: 200, okMedia: "application/javascript", errs: []int{404}},
		{method: "GET", path: "/v1/fleet/approvals/{id}", id: "peerApproval", tag: "approvals", auth: authNone,
			summary: "Replica to replica: a pending approval with its code, for a peer's page (signed with the fleet key; 404 otherwise)",
			ok:      200, okMedia: "application/json", errs: []int{404}},
		{method: "POST", path: "/v1/channels/{name}/callback", id: "channelCallback", tag: "approvals", auth: authNone,
			summary: "An approval channel's callback: Slack's interactivity requests (a block_actions payload), verified by Slack's " +
				"signing secret (v0, HMAC-SHA256 over v0:timestamp:body, five-minute window); a click decides as the approver " +
				"the Slack user is mapped to. 401 bad signature or stale, 403 unmapped user; a click on a decided request changes nothing (200)",
			formBody: true, ok: 200, errs: []int{400, 401, 403, 404, 409, 413, 500}},
	}
}

func mcpOperations() []op {
	var out []op
	for _, m := range []string{"POST", "GET", "DELETE"} {
		out = append(out, op{method: m, path: mcpPath, id: "mcp" + m, tag: "mcp", roles: rolesAgent,
			summary: "MCP Streamable HTTP (JSON-RPC; tools run_code, execute, files, browser, session_info)",
			ok:      200, okBody: sch("JSONRPCMessage", nil), okMedia: "text/event-stream", errs: []int{400, 401, 403, 404, 405}})
	}
	for _, p := range []string{mcpMetadataPath, rootMetadata} {
		for _, m := range []string{"GET", "OPTIONS"} {
			out = append(out, op{method: m, path: p, id: "mcpMetadata" + m + map[string]string{mcpMetadataPath: "", rootMetadata: "Root"}[p],
				tag: "mcp", auth: authNone, summary: "RFC 9728 protected-resource metadata of /mcp",
				ok: 200, okBody: sch("ProtectedResourceMetadata", nil)})
		}
	}
	return append(out, op{method: "POST", path: mcpForwardPath, id: "mcpForwardedCall", tag: "mcp", roles: rolesAgent,
		summary: "Replica to replica: a tool call forwarded to the replica serving its session (signed with the fleet key; 404 otherwise)",
		ok:      200, okMedia: "application/x-ndjson", errs: []int{400, 401, 403, 404}})
}

// deerflowPrefix is where the AIO/DeerFlow front end's routes live.
const deerflowPrefix = "/deerflow"

// deerflowOperations are the DeerFlow provisioner's. Their bodies are the
// front end's wire shapes (DeerFlowServer.Schemas), named here by fsch;
// the document has them when the front end is mounted.
func deerflowOperations() []op {
	base := deerflowPrefix + "/api/sandboxes"
	view := fsch("DeerFlowSandbox")
	return frontEnd([]op{
		{method: "POST", path: base, id: "deerflowCreateSandbox", tag: "deerflow", roles: rolesAgent, auth: authProvisioner,
			summary: "DeerFlow provisioner: the sandbox of (user_id, thread_id), idempotent; sandbox_url serves the AIO API",
			body:    fsch("DeerFlowCreateRequest"), ok: 200, okBody: view, errs: errsDF, errBody: errDeerFlow},
		{method: "GET", path: base, id: "deerflowListSandboxes", tag: "deerflow", roles: rolesAgent, auth: authProvisioner,
			summary: "The tenant's sandboxes", ok: 200, okBody: fsch("DeerFlowSandboxList"), errs: errsDF, errBody: errDeerFlow},
		{method: "GET", path: base + "/{sandbox_id}", id: "deerflowGetSandbox", tag: "deerflow", roles: rolesAgent, auth: authProvisioner,
			summary: "One sandbox", ok: 200, okBody: view, errs: errsDF, errBody: errDeerFlow},
		{method: "DELETE", path: base + "/{sandbox_id}", id: "deerflowDeleteSandbox", tag: "deerflow", roles: rolesAgent, auth: authProvisioner,
			summary: "Kill the sandbox URL and release its session; purge=true also deletes the workspace",
			query:   []param{q("purge", "boolean", "")}, ok: 200, okBody: fsch("DeerFlowDeleted"), errs: errsDF, errBody: errDeerFlow},
	})
}

// aioOperations are the AIO API subset at a sandbox URL; the capability in
// the path is the credential.
func aioOperations() []op {
	base := deerflowPrefix + "/sandboxes/{sandbox_id}/{capability}"
	file := func(p, id, summary, schema string) op {
		return op{method: "POST", path: base + p, id: id, tag: "aio", auth: authCapability, summary: summary +
			"; a workspace refusal is 200 with success false and an AIOFileError in data",
			body: fsch(schema + "Request"), ok: 200, okBody: fsch(schema + "Response"), orFileError: true,
			errs: errsAIOFile, errBody: errAIO}
	}
	return frontEnd([]op{
		{method: "GET", path: base + "/v1/sandbox", id: "aioSandbox", tag: "aio", auth: authCapability,
			summary: "Sandbox context and readiness (home_dir)", ok: 200, okBody: fsch("AIOSandboxInfo"),
			errs: errsAIOFile, errBody: errAIO},
		{method: "POST", path: base + "/v1/shell/exec", id: "aioShellExec", tag: "aio", auth: authCapability,
			summary: "Run a command as an execute (risk, policy, approval, audit); synchronous",
			body:    fsch("AIOShellExecRequest"), ok: 200, okBody: fsch("AIOShellExecResponse"),
			errs: errsAIORun, errBody: errAIO},
		{method: "POST", path: base + "/v1/shell/sessions/create", id: "aioShellCreate", tag: "aio", auth: authCapability,
			summary: "A shell session name (commands keep no shell state)", body: fsch("AIOShellSessionRequest"),
			ok: 200, okBody: fsch("AIOShellSessionResponse"), errs: errsAIOFile, errBody: errAIO},
		{method: "DELETE", path: base + "/v1/shell/sessions/{shell_id}", id: "aioShellDelete", tag: "aio", auth: authCapability,
			summary: "Forget a shell session name", ok: 200, okBody: fsch("AIOShellSessionResponse"),
			errs: errsAIOFile, errBody: errAIO},
		file("/v1/file/read", "aioFileRead", "Lines [start_line, end_line) of a text file", "AIOFileRead"),
		file("/v1/file/write", "aioFileWrite", "Write a file (utf-8 or base64)", "AIOFileWrite"),
		file("/v1/file/list", "aioFileList", "List a directory", "AIOFileList"),
		file("/v1/file/find", "aioFileFind", "Files matching a glob", "AIOFileFind"),
		file("/v1/file/search", "aioFileSearch", "A regular expression over one file's lines", "AIOFileSearch"),
		file("/v1/file/grep", "aioFileGrep", "Search files under a path", "AIOFileGrep"),
		file("/v1/file/replace", "aioFileReplace", "Replace every occurrence of a string", "AIOFileReplace"),
		{method: "GET", path: base + "/v1/file/download", id: "aioFileDownload", tag: "aio", auth: authCapability,
			summary: "A file's bytes", query: []param{qreq("path", "string", "")}, ok: 200, okMedia: mediaBinary,
			errs: errsAIOFile, errBody: errAIO},
	})
}

// frontEnd marks ops as a mounted front end's (DeerFlowServer): in the
// document only when it is mounted.
func frontEnd(ops []op) []op {
	for i := range ops {
		ops[i].frontEnd = true
	}
	return ops
}
