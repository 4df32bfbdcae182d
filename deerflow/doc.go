// Package deerflow is the AIO/DeerFlow front end (issue 20, DESIGN.md
// §14): a thin adapter over the manager's sessions, beside the REST (api)
// and MCP (mcp) front ends, mounted by api on the gateway's listener.
//
// DeerFlow's AioSandboxProvider, given `sandbox.provisioner_url:
// http://<gateway>/deerflow`, asks a provisioner for one sandbox per (user,
// thread) and then talks to the AIO sandbox HTTP API at the sandbox_url it
// gets back. sandgate answers both:
//
//   - /deerflow/api/sandboxes is the provisioner. api authenticates it (an
//     agent token in DeerFlow's X-API-Key header, its
//     provisioner_api_key, or as a bearer token) and hands the caller on
//     with manager.WithPrincipal. A sandbox is the session
//     "df.<user_id>.<thread_id>" of the token's tenant: the dots cannot
//     occur in either id, so two users' equal thread ids are two sessions.
//   - /deerflow/sandboxes/{sandbox_id}/{capability}/v1/... is the sandbox:
//     the AIO subset DeerFlow calls, served through the manager like the
//     rest of the API (shell/exec is an execute, the file calls are the
//     workspace API), each call audited under the sandbox's session.
//
// DeerFlow's AIO client sends no credentials, so the sandbox_url itself
// carries one: a random 256-bit capability bound to one sandbox, and so to
// one session (its creation is audited as deerflow.sandbox.create, naming
// the token that minted it). It authorises that session's AIO calls and
// nothing else (it is no bearer token anywhere), it dies when the sandbox
// is deleted or its session is deleted or expires through any API, and it
// is never logged: the gateway has no access log, and its error log names
// request ids, never paths.
//
// Paths are DeerFlow's own (layout.go): the session workspace is
// /mnt/user-data, for the file calls and, through the manager's layout,
// inside every executor, with workspace/, uploads/ and outputs/ always
// there and commands starting in /mnt/user-data/workspace.
//
// The sandboxes live in the store (Registry, a table of the audit
// database), so they survive a restart of the gateway, and in a
// PostgreSQL fleet every replica sees the same ones: a sandbox id and its
// URL work through any replica, and a delete through any replica ends it
// everywhere. A session is served by one replica (DESIGN.md §12): a
// sandbox call or a delete for a session another live replica
// serves is forwarded to that replica (Fleet), which verifies the hop as
// the REST routes do. A create, a get or a list is answered from the store
// by whichever replica it reaches.
package deerflow
