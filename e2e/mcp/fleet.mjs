// Calls sandgate's /mcp tools with the official MCP TypeScript SDK client,
// for e2e/fleet_test.go: one MCP session on the replica at SANDGATE_URL,
// the tool calls of CALLS (a JSON array of {name, arguments}) in order,
// with a progress token, and one JSON report on stdout: each call's
// result, or what it threw, and the progress notifications it got.
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const endpoint = new URL("/mcp", process.env.SANDGATE_URL);
const calls = JSON.parse(process.env.CALLS);
const pkg = JSON.parse(readFileSync(new URL("./node_modules/@modelcontextprotocol/sdk/package.json", import.meta.url)));
const client = new Client({ name: "sandgate-fleet-e2e", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(endpoint, {
  requestInit: { headers: { Authorization: `Bearer ${process.env.SANDGATE_TOKEN}` } },
}));
const report = { sdk: pkg.version, calls: [] };
for (const c of calls) {
  const progress = [];
  try {
    const result = await client.callTool({ name: c.name, arguments: c.arguments }, undefined, {
      onprogress: (p) => progress.push(p),
      timeout: 600000,
    });
    report.calls.push({ name: c.name, result, progress });
  } catch (e) {
    report.calls.push({ name: c.name, thrown: String(e && e.stack ? e.stack : e), progress });
  }
}
await client.close();
process.stdout.write(JSON.stringify(report));
