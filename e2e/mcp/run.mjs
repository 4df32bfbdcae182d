// Drives sandgate's /mcp endpoint with the official MCP TypeScript SDK
// (Client + StreamableHTTPClientTransport), as an MCP host would, and
// prints one JSON report on stdout: each step's raw result (or what it
// threw). e2e/mcp_test.go starts the gateway, acts as the approver over
// REST while the HIGH step is held, and checks the report.
//
// Environment: SANDGATE_URL (gateway base URL), SANDGATE_TOKEN (agent
// token), PAGE_URL (a loopback page the gateway's browser may open).
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, ElicitationCompleteNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

// The programs; keep them in step with the checks in e2e/mcp_test.go.
const HIGH = "import subprocess\nprint(subprocess.run(['echo','approved over mcp'],capture_output=True).stdout.decode().strip())";
const DATA = "written over mcp\n";

const base = process.env.SANDGATE_URL;
const token = process.env.SANDGATE_TOKEN;
const pageURL = process.env.PAGE_URL;
const endpoint = new URL("/mcp", base);
const pkg = JSON.parse(readFileSync(new URL("./node_modules/@modelcontextprotocol/sdk/package.json", import.meta.url)));
const report = { sdk: pkg.version, steps: [] };

async function step(name, fn) {
  try {
    report.steps.push({ step: name, result: await fn() });
  } catch (e) {
    report.steps.push({ step: name, thrown: String(e && e.stack ? e.stack : e) });
  }
}

const clientInfo = { name: "sandgate-e2e", version: "1.0.0" };

// Without a token: the raw answer, then what the SDK client makes of it.
await step("no_token_http", async () => {
  const r = await fetch(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo } }),
  });
  return { status: r.status, www_authenticate: r.headers.get("www-authenticate"), body: await r.json() };
});
await step("no_token_client", async () => {
  const c = new Client(clientInfo);
  try {
    await c.connect(new StreamableHTTPClientTransport(endpoint));
    return { connected: true };
  } catch (e) {
    return { connected: false, code: e.code ?? null, message: String(e.message) };
  }
});

// The real session: URL elicitation declared, a bearer token on every request.
const client = new Client(clientInfo, { capabilities: { elicitation: { url: {} } } });
const elicitations = [];
const completions = [];
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  elicitations.push(req.params);
  return { action: "accept" };
});
client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => {
  completions.push(n.params.elicitationId);
});
const transport = new StreamableHTTPClientTransport(endpoint, {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
report.protocol_version = transport.protocolVersion ?? null;
report.server = client.getServerVersion() ?? null;

await step("list_tools", async () =>
  (await client.listTools()).tools.map((t) => ({ name: t.name, input: t.inputSchema, output: t.outputSchema })));

await step("run_safe", () => client.callTool({ name: "run_code", arguments: { code: "print('hello from mcp')" } }));

// Held for approval: progress keeps the request alive (the SDK's default
// request timeout is 60 s, an approval may take longer).
await step("run_high_approved", async () => {
  const progress = [];
  const started = Date.now();
  const result = await client.callTool({ name: "run_code", arguments: { code: HIGH } }, undefined, {
    onprogress: (p) => progress.push({ ...p, after_ms: Date.now() - started }),
    resetTimeoutOnProgress: true,
    timeout: 30000,
    maxTotalTimeout: 300000,
  });
  return { result, progress, elicitations: [...elicitations], completions: [...completions] };
});

await step("execute_denied", () => client.callTool({ name: "execute", arguments: { command: "rm -rf /" } }));

await step("write_then_run", async () => {
  const write = await client.callTool({ name: "write_file", arguments: { path: "/workspace/mcp/data.txt", content: DATA } });
  const run = await client.callTool({ name: "run_code",
    arguments: { code: "print(open('/workspace/mcp/data.txt').read().strip().upper())" } });
  return { write, run };
});

await step("browser_screenshot", async () => {
  const navigate = await client.callTool({ name: "browser", arguments: { action: "navigate", params: { url: pageURL } } });
  const screenshot = await client.callTool({ name: "browser", arguments: { action: "screenshot" } });
  return { navigate, screenshot };
});

await step("session_info", () => client.callTool({ name: "session_info", arguments: {} }));

// End the MCP session (DELETE): the gateway releases its session's browser.
await step("terminate", async () => {
  await transport.terminateSession();
  await client.close();
  return { terminated: true };
});

process.stdout.write(JSON.stringify(report));
