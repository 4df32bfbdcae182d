// Every operation of deepagents' BaseSandbox (the real npm package, as the
// lockfile pins it) through SandgateSandbox against a real gateway, with
// execute streamed; then, with execute answered as JSON, the operations
// whose transport differs (execute itself, and read, which deepagents
// builds on it). The expectations are what deepagents' own local backends
// return for the same calls.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { BaseSandbox, isSandboxBackend } from "deepagents";

import { REFUSED_EXIT, SandgateSandbox } from "@sandgate/client/deepagents";

import { dec, enc, gateway, HIGH_SHELL, sessionId } from "./gateway.js";

const APP = 'import os\nprint("hello from app")\nprint(os.getcwd())\n';
const APP_EDITED = APP.replace("hello from app", "hello from sandgate");
const NOTES = "first line\nTODO: ship it\nlast line\n";

const entries = (ls) => Object.fromEntries((ls.files ?? []).map((f) => [f.path, f.is_dir]));

// The steps the JSON variant repeats; the streamed variant runs them all.
const jsonSteps = new Set(["is a deepagents sandbox backend", "write and uploadFiles (partial success)", "read, readRaw", "edit",
  "execute: output, exit code, working directory", "execute: a command the approver denies comes back as a refusal"]);

for (const stream of [true, false]) {
  const step = (name, fn) => (stream || jsonSteps.has(name)) && test(name, fn);
  describe(`BaseSandbox operations (${stream ? "streamed" : "JSON"} execute)`, () => {
    // One session per variant; the steps run in order and build on each other.
    let g, sb;
    const events = [];
    const setup = (t) => {
      g ??= gateway(t);
      if (g && !sb) {
        sb = new SandgateSandbox({
          baseUrl: g.baseUrl, token: g.token, sessionId: sessionId(stream ? "ts-da-stream" : "ts-da-json"), timeoutS: 60,
          ...(stream ? { onEvent: (ev) => events.push(ev) } : {}),
        });
        // Keep what each command answered, for the failure messages of
        // the operations deepagents builds on execute.
        const execute = sb.execute.bind(sb);
        sb.execute = async (command, opts) => {
          const res = await execute(command, opts);
          runs.push({ command: command.slice(0, 60), ...res, output: res.output.slice(0, 300) });
          return res;
        };
      }
      return sb;
    };
    const runs = [];
    const lastRun = () => JSON.stringify(runs.at(-1));

    step("is a deepagents sandbox backend", (t) => {
      if (!setup(t)) return;
      assert.ok(sb instanceof BaseSandbox);
      assert.ok(isSandboxBackend(sb));
      assert.equal(sb.id, sb.session.id);
    });

    step("write and uploadFiles (partial success)", async (t) => {
      if (!setup(t)) return;
      assert.deepEqual(await sb.write("/workspace/src/app.py", APP), { path: "/workspace/src/app.py", filesUpdate: null });
      await sb.write("/workspace/src/lib/util.py", "def greet(n):\n    return n\n");
      await sb.write("/workspace/notes/todo.txt", NOTES);
      const up = await sb.uploadFiles([
        ["/workspace/data/points.csv", enc("x,y\n1,2\n")],
        ["/etc/sandgate-escape", enc("must not be written")],
      ]);
      assert.deepEqual(up, [
        { path: "/workspace/data/points.csv", error: null },
        { path: "/etc/sandgate-escape", error: "invalid_path" },
      ]);
    });

    step("read, readRaw", async (t) => {
      if (!setup(t)) return;
      const r = await sb.read("/workspace/src/app.py");
      assert.equal(r.error, undefined, lastRun());
      assert.equal(r.content, APP.replace(/\n$/, "").split("\n").map((l, i) => `${String(i + 1).padStart(6)}\t${l}`).join("\n") + "\n");
      const slice = await sb.read("/workspace/notes/todo.txt", 1, 1);
      assert.equal(slice.content, "     2\tTODO: ship it\n");
      assert.deepEqual(await sb.read("/workspace/no-such-file.txt"), { error: "File '/workspace/no-such-file.txt' not found" });
      assert.equal((await sb.readRaw("/workspace/notes/todo.txt")).data.content, NOTES);
    });

    step("edit", async (t) => {
      if (!setup(t)) return;
      assert.equal((await sb.edit("/workspace/src/app.py", "hello from app", "hello from sandgate")).occurrences, 1);
      assert.deepEqual(await sb.edit("/workspace/src/app.py", "not in the file", "x"), {
        error: "String not found in file '/workspace/src/app.py'",
      });
      assert.equal((await sb.readRaw("/workspace/src/app.py")).data.content, APP_EDITED);
    });

    step("ls, grep, glob", async (t) => {
      if (!setup(t)) return;
      assert.deepEqual(entries(await sb.ls("/workspace")), {
        "/workspace/src/": true, "/workspace/notes/": true, "/workspace/data/": true,
      }, lastRun());
      assert.deepEqual(entries(await sb.ls("/workspace/src")), { "/workspace/src/lib/": true, "/workspace/src/app.py": false }, lastRun());
      assert.deepEqual((await sb.grep("TODO:", "/workspace")).matches, [
        { path: "/workspace/notes/todo.txt", line: 2, text: "TODO: ship it" },
      ], lastRun());
      assert.deepEqual((await sb.grep("sandgate", "/workspace", "*.py")).matches, [
        { path: "/workspace/src/app.py", line: 2, text: 'print("hello from sandgate")' },
      ], lastRun());
      const py = await sb.glob("**/*.py", "/workspace");
      assert.deepEqual(py.files.map((f) => f.path).sort(), ["src/app.py", "src/lib/util.py"], lastRun());
      assert.equal(py.truncated, false);
    });

    step("execute: output, exit code, working directory", async (t) => {
      if (!setup(t)) return;
      events.length = 0;
      assert.deepEqual(await sb.execute("python3 /workspace/src/app.py"), {
        output: "hello from sandgate\n/workspace\n", exitCode: 0, truncated: false,
      });
      assert.deepEqual(await sb.execute("echo out; echo err >&2; exit 3"), {
        output: "out\n[stderr] err\n", exitCode: 3, truncated: false,
      });
      assert.deepEqual(await sb.execute("wc -l < notes/todo.txt"), { output: "3\n", exitCode: 0, truncated: false });
      const names = events.map((e) => e.event);
      if (stream) {
        assert.ok(names.includes("decision") && names.includes("stdout") && names.at(-1) === "exit", `events ${names}`);
      } else {
        assert.deepEqual(names, []);
      }
    });

    step("execute: a command the approver denies comes back as a refusal", async (t) => {
      if (!setup(t)) return;
      // The approver watches the pending list, as the approval page does.
      const deny = (async () => {
        for (let i = 0; i < 300; i++) {
          const list = await g.approver.listApprovals();
          const mine = list.approvals.find((a) => a.session_id === sb.id);
          if (mine) return g.approver.decideApproval(mine.id, "deny", "node test");
          await new Promise((r) => setTimeout(r, 100));
        }
        throw new Error("no pending approval for the session");
      })();
      const res = await sb.execute(HIGH_SHELL);
      await deny;
      assert.equal(res.exitCode, REFUSED_EXIT);
      assert.match(res.output, /approval_denied/);
    });

    step("downloadFiles (partial success), delete", async (t) => {
      if (!setup(t)) return;
      await sb.execute("mkdir -p /workspace/out && printf 'made by code\\n' > /workspace/out/result.txt");
      const dl = await sb.downloadFiles(["/workspace/out/result.txt", "/workspace/missing.bin"]);
      assert.deepEqual(dl.map((d) => [d.path, dec(d.content), d.error]), [
        ["/workspace/out/result.txt", "made by code\n", null],
        ["/workspace/missing.bin", null, "file_not_found"],
      ]);
      assert.deepEqual(await sb.delete("/workspace/notes/todo.txt"), { path: "/workspace/notes/todo.txt", filesUpdate: null });
      assert.equal((await sb.downloadFiles(["/workspace/notes/todo.txt"]))[0].error, "file_not_found");
      assert.deepEqual(await sb.delete("/workspace/notes/todo.txt"), { error: "Error: '/workspace/notes/todo.txt' not found" });
      await sb.delete("/workspace/out");
      assert.deepEqual(entries(await sb.ls("/workspace")), {
        "/workspace/src/": true, "/workspace/notes/": true, "/workspace/data/": true,
      });
      await sb.close({ purge: true });
    });
  });
}
