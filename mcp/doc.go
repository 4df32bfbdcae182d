// Package mcp is sandgate's Model Context Protocol server (DESIGN.md §10):
// the tools an MCP client (Claude Code, Cursor, an agent framework) calls
// to run code, touch files and drive a browser, each going through exactly
// the pipeline the HTTP API uses. It is built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) and mounted by package api.
//
// # Transport and authentication
//
// Streamable HTTP at /mcp (POST for messages, GET for the server's stream,
// DELETE to end a session), stateful: the SDK issues an Mcp-Session-Id at
// initialize. The api package authenticates every request with the same
// bearer tokens as the HTTP API (agent role only; 401 otherwise, with a
// WWW-Authenticate naming the RFC 9728 metadata) and hands the principal to
// ServeMCP. The principal is bound to the MCP session: a request naming
// another token's session id is refused 403 by the SDK, so a session id
// alone is worth nothing.
//
// RFC 9728 protected-resource metadata is served at
// /.well-known/oauth-protected-resource/mcp. sandgate's tokens are issued
// by its operator, not by an OAuth server, so the metadata names no
// authorization server; it tells a client that /mcp takes bearer tokens in
// the Authorization header.
//
// DNS rebinding and cross-origin protection: a request whose Host is not a
// loopback name while the gateway listens on loopback is refused (the SDK's
// check), as is one whose Host is outside Config.AllowedHosts when that
// list is set. A request carrying an Origin is refused unless the origin
// is the gateway's own (scheme, Host) or listed in Config.AllowedOrigins,
// whatever its method, and so is one a browser marks cross-site through
// Fetch metadata (Sec-Fetch-Site). No CORS headers are ever sent, so a
// browser page elsewhere cannot read an answer either.
//
// # Sessions
//
// One sandgate session per MCP session, by default: its id is
// "mcp-" followed by 32 hex digits of SHA-256 over the MCP session id. The
// MCP session id itself is a credential of sorts (the SDK binds it to the
// token) and is never shown: audit records, the approval page and
// session_info show the derived id only. Every tool takes an optional
// session_id naming another session the token may use (one created over
// the HTTP API, for example, so an MCP client and a REST client share a
// workspace); the manager applies the same session checks as for the HTTP
// API.
//
// When the MCP session ends (the client's DELETE, or SessionTimeout of
// inactivity), the per-session state of its derived session (browser, pool
// instance, warm interpreters) is released as DELETE /v1/sessions/{id}
// would; its workspace is kept unless Config.PurgeOnClose is set, so files
// an agent wrote survive a reconnect (reach them with session_id) and can
// be read over the HTTP API. Sessions named with session_id are never
// released by an MCP session's end.
//
// # Tools
//
// run_code, execute, read_file, write_file, edit_file, ls, glob, grep,
// delete_file, browser (its action parameter names the action, its params
// are the HTTP API's) and session_info. Each tool has a typed input schema
// (unknown arguments are refused) and an output schema. run_code and
// execute call manager.Run, so they get the same validation, risk
// assessment, policy decision, approval, executor and single audit record
// as POST /run_code and /execute; the file tools call the manager's file
// operations and the browser tool the browser router, as the HTTP handlers
// do.
//
// A successful call's structuredContent is the tool's output object (for
// run_code and execute: stdout, stderr, exit_code, truncated, timed_out,
// sandbox_type, risk, decision, approval, request_id, session_id), and its
// content a text rendering of it meant for a model. A screenshot also comes
// back as image content (image/png). A refused or failed call is a tool
// result with isError set, no structuredContent, a text content that
// starts with the stable error code ("approval_denied: ..."), and the full
// error body of the HTTP API (code, message, reasons, fields, request_id)
// under the result's _meta key "sandgate/error". A program that ran and
// exited non-zero is not an error: it is a result with its exit_code.
//
// # Approvals
//
// A call the policy holds for approval waits, as over HTTP, up to the
// approval timeout. While it waits, a client that sent a progress token
// gets a progress notification every Config.ProgressInterval ("waiting for
// approval apr_...: HIGH, subprocess spawns processes"), with the seconds
// waited as progress and the approval timeout as total, so clients that
// reset their request timeout on progress keep waiting. A client that
// declared URL-mode elicitation is also sent one elicitation pointing at the
// approval page, completed (notifications/elicitation/complete) once an
// approver decides; declining it does not deny the request, only an
// approver or the timeout does. The approver sees the request on the page
// like any other, with "via MCP" and the client's name next to the
// principal. A denial or a timeout is an isError result with
// approval_denied or approval_timeout.
//
// Progress while a program runs (streamed output) will use the same
// notifications: see progress.go.
package mcp
