// The README's example for real: createDeepAgent({ backend: new
// SandgateSandbox(...) }), driven by a scripted chat model (no LLM) that
// calls deepagents' own file and execute tools; each tool call reaches the
// gateway through SandgateSandbox.
import assert from "node:assert/strict";
import { test } from "node:test";

import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage } from "@langchain/core/messages";
import { createDeepAgent } from "deepagents";

import { SandgateSandbox } from "@sandgate/client/deepagents";

import { gateway, sessionId } from "./gateway.js";

/** ScriptedModel answers each turn with the next scripted message. */
class ScriptedModel extends BaseChatModel {
  constructor(script) {
    super({});
    this.script = script;
    this.turn = 0;
  }

  _llmType() {
    return "scripted";
  }

  bindTools() {
    return this;
  }

  async _generate() {
    const message = this.script[this.turn++] ?? new AIMessage("done");
    return { generations: [{ text: String(message.content), message }] };
  }
}

const call = (id, name, args) => new AIMessage({ content: "", tool_calls: [{ id, name, args, type: "tool_call" }] });

test("createDeepAgent with a SandgateSandbox backend runs deepagents' tools through the gateway", async (t) => {
  const g = gateway(t);
  if (!g) return;
  const sandbox = new SandgateSandbox({ baseUrl: g.baseUrl, token: g.token, sessionId: sessionId("ts-agent"), stream: true });
  const model = new ScriptedModel([
    call("c1", "write_file", { file_path: "/workspace/agent/hello.py", content: "print('hi from the agent')\n" }),
    call("c2", "execute", { command: "python3 /workspace/agent/hello.py" }),
    call("c3", "edit_file", { file_path: "/workspace/agent/hello.py", old_string: "the agent", new_string: "sandgate" }),
    call("c4", "read_file", { file_path: "/workspace/agent/hello.py" }),
    call("c5", "ls", { path: "/workspace/agent" }),
    new AIMessage("done"),
  ]);
  const agent = createDeepAgent({ model, backend: sandbox });
  const result = await agent.invoke({ messages: [{ role: "user", content: "say hi" }] }, { recursionLimit: 40 });
  const tools = Object.fromEntries(
    result.messages.filter((m) => m.tool_call_id).map((m) => [m.tool_call_id, m.text]),
  );
  assert.match(tools.c2, /hi from the agent\n/);
  assert.match(tools.c2, /exit code 0/);
  assert.match(tools.c4, /print\('hi from sandgate'\)/);
  assert.match(tools.c5, /\/workspace\/agent\/hello\.py/);
  assert.equal(result.messages.at(-1).content, "done");
  const bytes = await sandbox.session.getFile("/workspace/agent/hello.py");
  assert.equal(new TextDecoder().decode(bytes), "print('hi from sandgate')\n");
  await sandbox.close({ purge: true });
});
