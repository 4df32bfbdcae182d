// The gateway the suites run against, from the environment that
// e2e/clients_test.go sets up: SANDGATE_URL, SANDGATE_TOKEN (agent),
// SANDGATE_APPROVER_TOKEN and SANDGATE_MODE. Without them a suite skips,
// or fails when SANDGATE_REQUIRE_NPM_CLIENTS=1 (as under make test).
import { randomBytes } from "node:crypto";

import { SandgateClient } from "@sandgate/client";

const env = process.env;

/** gateway returns the gateway's settings, or null after skipping t. */
export function gateway(t) {
  if (env.SANDGATE_URL && env.SANDGATE_TOKEN && env.SANDGATE_APPROVER_TOKEN && env.SANDGATE_MODE) {
    return {
      baseUrl: env.SANDGATE_URL,
      token: env.SANDGATE_TOKEN,
      mode: env.SANDGATE_MODE,
      agent: new SandgateClient({ baseUrl: env.SANDGATE_URL, token: env.SANDGATE_TOKEN }),
      approver: new SandgateClient({ baseUrl: env.SANDGATE_URL, token: env.SANDGATE_APPROVER_TOKEN }),
    };
  }
  const msg = "no gateway: run through `go test ./e2e -run TestClients` (sets SANDGATE_URL and friends)";
  if (env.SANDGATE_REQUIRE_NPM_CLIENTS === "1") throw new Error(msg);
  t.skip(msg);
  return null;
}

/** sessionId is a fresh session name, so suites never share a workspace. */
export function sessionId(prefix) {
  return `${prefix}-${randomBytes(6).toString("hex")}`;
}

export const enc = (s) => new TextEncoder().encode(s);
export const dec = (b) => (b == null ? null : new TextDecoder().decode(b));

/** HIGH in both modes: a process spawn, so the policy asks a human. */
export const HIGH_PYTHON = "import subprocess\nprint(subprocess.run(['echo','hi'],capture_output=True).stdout.decode())";
export const HIGH_SHELL = "nc -l 80";
