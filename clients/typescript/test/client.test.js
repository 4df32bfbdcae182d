// The typed client against a real gateway: JSON and streamed runs, an
// approval seen through the stream, the files API, and the error type.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ndjson, SandgateError } from "@sandgate/client";

import { enc, gateway, HIGH_PYTHON, sessionId } from "./gateway.js";

test("ndjson reads values split across chunks and characters", async () => {
  const text = '{"event":"stdout","data":"h\u00e9"}\n\n{"event":"exit","body":{"a":1}}';
  const bytes = enc(text);
  const chunks = async function* () {
    for (let i = 0; i < bytes.length; i += 3) yield bytes.slice(i, i + 3); // splits é
  };
  const got = [];
  for await (const v of ndjson(chunks())) got.push(v);
  assert.deepEqual(got, [{ event: "stdout", data: "h\u00e9" }, { event: "exit", body: { a: 1 } }]);
});

test("run_code: JSON, then streamed with the same result", async (t) => {
  const g = gateway(t);
  if (!g) return;
  const s = g.agent.session(sessionId("ts-run"));
  const code = "import sys\nfor i in range(3):\n    print('line', i, flush=True)\nprint('oops', file=sys.stderr)\n";
  const plain = await s.runCode({ code, language: "python" });
  assert.equal(plain.stdout, "line 0\nline 1\nline 2\n");
  assert.equal(plain.stderr, "oops\n");
  assert.equal(plain.exit_code, 0);
  assert.equal(plain.success, true);

  const events = [];
  const streamed = await s.runCode({ code, language: "python" }, { onEvent: (ev) => events.push(ev) });
  const names = events.map((e) => e.event).filter((n) => n !== "keepalive");
  assert.equal(names[0], "decision", `events ${names}`);
  assert.equal(names.at(-1), "exit");
  assert.equal(events[0].decision.action, "allow");
  const out = events.filter((e) => e.event === "stdout").map((e) => e.data).join("");
  const err = events.filter((e) => e.event === "stderr").map((e) => e.data).join("");
  assert.equal(out, streamed.stdout);
  assert.equal(err, streamed.stderr);
  const seqs = events.filter((e) => e.seq !== undefined).map((e) => e.seq);
  assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), "seq numbers in order");
  assert.equal(streamed.stdout, plain.stdout);
  assert.equal(streamed.sandbox_type, plain.sandbox_type);
});

test("execute streams its output and ends with the JSON response", async (t) => {
  const g = gateway(t);
  if (!g) return;
  const s = g.agent.session(sessionId("ts-exec"));
  const chunks = [];
  const res = await s.execute("echo out; echo err >&2; exit 3", {
    onEvent: (ev) => ev.event === "stdout" && chunks.push(ev.data),
  });
  assert.equal(res.output, "out\n[stderr] err\n");
  assert.equal(res.exit_code, 3);
  assert.equal(chunks.join(""), "out\n");
});

test("leaving a stream early cancels the run", async (t) => {
  const g = gateway(t);
  if (!g) return;
  const s = g.agent.session(sessionId("ts-cancel"));
  for await (const ev of s.events("execute", { command: "echo started; sleep 60; echo finished" })) {
    if (ev.event !== "stdout") continue;
    assert.equal((await s.info()).running, 1, "the run is under way");
    break; // the client goes away mid-run
  }
  // The gateway sees the disconnect and kills the run long before its 60 s.
  const deadline = Date.now() + 30_000;
  let info;
  do {
    info = await s.info();
    if (info.running === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  } while (Date.now() < deadline);
  assert.equal(info.running, 0, JSON.stringify(info));
  assert.equal(info.runs, 1);
});

test("a held run streams approval_pending, an approver approves, it runs", async (t) => {
  const g = gateway(t);
  if (!g) return;
  const s = g.agent.session(sessionId("ts-held"));
  const names = [];
  let decided;
  const res = await s.runCode({ code: HIGH_PYTHON, language: "python" }, {
    onEvent: (ev) => {
      names.push(ev.event);
      if (ev.event === "approval_pending") {
        assert.equal(ev.approval.risk_level, "HIGH");
        decided = g.approver.decideApproval(ev.approval.id, "approve", "node test");
      }
    },
  });
  await decided;
  assert.deepEqual(names.filter((n) => n !== "keepalive" && n !== "stdout" && n !== "stderr"),
    ["decision", "approval_pending", "approval_resolved", "exit"]);
  assert.equal(res.stdout, "hi\n\n", JSON.stringify(res));
  assert.equal(res.approval.status, "approved");
});

test("refusals are SandgateErrors with the stable code, streamed or not", async (t) => {
  const g = gateway(t);
  if (!g) return;
  const s = g.agent.session(sessionId("ts-err"));
  // Refused by validation before any stream starts: the JSON error answer.
  for (const stream of [false, true]) {
    await assert.rejects(s.runCode({ code: "print(1)", language: "cobol" }, { stream }), (err) => {
      assert.ok(err instanceof SandgateError);
      assert.equal(err.status, 400);
      assert.equal(err.code, "invalid_request");
      assert.ok(err.requestId);
      return true;
    });
  }
  // Denied by an approver after the stream started: the error event.
  await assert.rejects(
    s.runCode({ code: HIGH_PYTHON, language: "python" }, {
      onEvent: (ev) => ev.event === "approval_pending" && g.approver.decideApproval(ev.approval.id, "deny", "node test"),
    }),
    (err) => err instanceof SandgateError && err.status === 403 && err.code === "approval_denied",
  );
  await assert.rejects(s.getFile("/etc/passwd"), (err) => err.code === "path_traversal" && err.status === 400);
  await assert.rejects(s.getFile("/workspace/missing"), (err) => err.code === "not_found" && err.status === 404);
  const bad = new (g.agent.constructor)({ baseUrl: g.baseUrl, token: "not-a-token" });
  await assert.rejects(bad.session("x").listFiles(), (err) => err.code === "unauthorized" && err.status === 401);
});

test("files: write, read, edit, list, glob, grep, get, delete", async (t) => {
  const g = gateway(t);
  if (!g) return;
  const s = g.agent.session(sessionId("ts-files"));
  const w = await s.writeFile("/workspace/docs/a.txt", "alpha\nbeta\n");
  assert.equal(w.created, true);
  assert.equal(w.path, "/workspace/docs/a.txt");
  await s.writeFile("docs/a.txt", "gamma\n", { mode: "append" });
  await assert.rejects(s.writeFile("docs/a.txt", "x", { mode: "create" }));
  const r = await s.readFile("docs/a.txt", { offset: 1, limit: 1 });
  assert.equal(r.content, "     2\tbeta");
  assert.equal(r.total_lines, 3);
  assert.equal((await s.editFile("docs/a.txt", "beta", "BETA")).occurrences, 1);
  await assert.rejects(s.editFile("docs/a.txt", "nope", "x"), (err) => err.code === "edit_no_match");
  const l = await s.listFiles("/workspace");
  assert.deepEqual(l.entries.map((e) => [e.path, e.type]), [["/workspace/docs", "dir"]]);
  const gl = await s.glob("**/*.txt");
  assert.deepEqual(gl.entries.map((e) => e.path), ["/workspace/docs/a.txt"]);
  const gr = await s.grep("BETA", { path: "/workspace" });
  assert.deepEqual(gr.matches, [{ path: "/workspace/docs/a.txt", line: 2, text: "BETA" }]);
  assert.equal(new TextDecoder().decode(await s.getFile("docs/a.txt")), "alpha\nBETA\ngamma\n");
  assert.equal((await s.deleteFile("docs", { recursive: true })).deleted, true);
  assert.deepEqual((await s.listFiles()).entries, []);
  const info = await s.info();
  assert.equal(info.id, s.id);
  await s.delete({ purge: true });
});
