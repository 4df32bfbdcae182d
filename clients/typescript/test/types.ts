// Compile-only: the hand-written declarations against the pinned
// deepagents' own (run by `npm test` through tsc --noEmit). A declaration
// that drifts from deepagents' BaseSandbox contract fails here.
import { createDeepAgent, type BackendProtocolV2, type SandboxBackendProtocolV2, type ExecuteResponse } from "deepagents";

import { SandgateClient, SandgateError, type StreamEvent, type ExecuteResponse as GatewayExecute } from "@sandgate/client";
import { SandgateSandbox, REFUSED_EXIT } from "@sandgate/client/deepagents";

const sandbox = new SandgateSandbox({ baseUrl: "http://127.0.0.1:8080", token: "t", sessionId: "s", stream: true });
const asProtocol: SandboxBackendProtocolV2 = sandbox;
const asBackend: BackendProtocolV2 = sandbox;
const id: string = sandbox.id;
const exit: 126 = REFUSED_EXIT;

export async function check(): Promise<void> {
  const r: ExecuteResponse = await sandbox.execute("ls");
  const agent = createDeepAgent({ backend: sandbox });
  const client = new SandgateClient({ baseUrl: "http://127.0.0.1:8080", token: "t" });
  const res: GatewayExecute = await client.session("s").execute("ls", {
    onEvent: (ev: StreamEvent<GatewayExecute>) => {
      if (ev.event === "stdout") {
        const n: number = ev.seq;
      }
    },
  });
  try {
    await client.session("s").getFile("/workspace/x");
  } catch (err) {
    if (err instanceof SandgateError) {
      const code: string = err.code;
    }
  }
  void [asProtocol, asBackend, id, exit, r, agent, res];
}
