// Drives sandgate's E2B front end (/e2b) with the unmodified E2B SDKs, as
// their quickstarts do, configured only through E2B's own environment
// variables (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL), and prints one
// JSON report on stdout: each step's result, or what it threw (the
// error's name and message). e2e/e2b_test.go starts a STRICT gateway,
// approves the HIGH command over REST while it is held, and checks the
// report and the audit.
//
// The quickstarts followed: e2b's "Sandbox.create, commands.run,
// files.write/read, kill" and the code interpreter's "runCode with a
// pandas DataFrame and a matplotlib chart".
import { readFileSync } from "node:fs";
import { Sandbox as CodeInterpreter } from "@e2b/code-interpreter";
import { Sandbox, CommandExitError } from "e2b";

// The commands; keep them in step with the checks in e2e/e2b_test.go.
// HIGH: the command name is built at run time, so the policy asks a human.
const HIGH = "c=ec; ${c}ho approved-over-e2b";
// HIGH_DENIED: held like HIGH, and the approver denies it.
const HIGH_DENIED = "c=ec; ${c}ho denied-over-e2b";
// CRITICAL: never runs in STRICT.
const CRITICAL = "rm -rf /";

const version = (p) => JSON.parse(readFileSync(new URL(`./node_modules/${p}/package.json`, import.meta.url))).version;
const report = { sdk: { e2b: version("e2b"), "@e2b/code-interpreter": version("@e2b/code-interpreter") }, steps: [] };

async function step(name, fn) {
  process.stderr.write(`step ${name}\n`);
  try {
    report.steps.push({ step: name, result: await fn() });
  } catch (e) {
    report.steps.push({ step: name, thrown: { name: e?.name ?? "", message: String(e?.message ?? e),
      exitCode: e?.exitCode, stderr: e?.stderr, isCommandExit: e instanceof CommandExitError } });
  }
}

// --- e2b: the sandbox, commands and files.
const sbx = await Sandbox.create();
report.sandbox_id = sbx.sandboxId;
await step("create", async () => ({ id: sbx.sandboxId, domain: sbx.sandboxDomain ?? null, running: await sbx.isRunning() }));

await step("run_on_stdout", async () => {
  const lines = [];
  const res = await sbx.commands.run("echo hello from e2b; echo to-stderr >&2; pwd", {
    onStdout: (d) => lines.push(d),
  });
  return { stdout: res.stdout, stderr: res.stderr, exitCode: res.exitCode, onStdout: lines };
});

await step("files", async () => {
  const info = await sbx.files.write("/home/user/hello.txt", "written through the e2b sdk\n");
  const back = await sbx.files.read("/home/user/hello.txt");
  const seenByCommand = (await sbx.commands.run("cat hello.txt")).stdout;
  const listed = (await sbx.files.list("/home/user")).map((e) => ({ name: e.name, type: e.type, path: e.path }));
  const made = await sbx.files.makeDir("/home/user/sub/dir");
  const exists = await sbx.files.exists("/home/user/hello.txt");
  await sbx.files.remove("/home/user/hello.txt");
  const gone = !(await sbx.files.exists("/home/user/hello.txt"));
  return { info, back, seenByCommand, listed, made, exists, gone };
});

await step("exit_nonzero", async () => {
  try {
    await sbx.commands.run("echo failing >&2; exit 3");
    return { thrown: false };
  } catch (e) {
    return { thrown: true, name: e.name, isCommandExit: e instanceof CommandExitError, exitCode: e.exitCode, stderr: e.stderr };
  }
});

await step("high_held_then_approved", async () => {
  const t0 = Date.now();
  const res = await sbx.commands.run(HIGH, { timeoutMs: 120_000 });
  return { stdout: res.stdout, exitCode: res.exitCode, waitedMs: Date.now() - t0 };
});

await step("high_held_then_denied", async () => {
  try {
    await sbx.commands.run(HIGH_DENIED, { timeoutMs: 120_000 });
    return { thrown: false };
  } catch (e) {
    return { thrown: true, name: e.name, isCommandExit: e instanceof CommandExitError, exitCode: e.exitCode,
      error: e.error, message: e.message, stderr: e.stderr };
  }
});

await step("critical_denied", async () => {
  try {
    await sbx.commands.run(CRITICAL);
    return { thrown: false };
  } catch (e) {
    return { thrown: true, name: e.name, isCommandExit: e instanceof CommandExitError, exitCode: e.exitCode,
      error: e.error, message: e.message, stderr: e.stderr };
  }
});

// A command that lives as long as its stream: listed, then killed by pid.
await step("list_and_kill_pid", async () => {
  const h = await sbx.commands.run("sleep 30", { background: true });
  const listed = (await sbx.commands.list()).map((p) => p.pid);
  const killed = await sbx.commands.kill(h.pid);
  let exit = null;
  try {
    await h.wait();
  } catch (e) {
    exit = { name: e.name, exitCode: e.exitCode, isCommandExit: e instanceof CommandExitError };
  }
  const again = await sbx.commands.kill(h.pid);
  return { pid: h.pid, listed, killed, exit, again };
});

// A server started in the background and fetched from another command
// over the sandbox's loopback; connect(pid) follows it from a second
// stream, kill(pid) ends it, and it leaves the process list.
await step("background_server", async () => {
  const server = await sbx.commands.run(
    "cd /tmp && echo served-over-loopback > index.html && exec python3 -m http.server 8000 --bind 127.0.0.1",
    { background: true, timeoutMs: 0 });
  server.wait().catch(() => {});
  const fetched = await sbx.commands.run(
    "for i in $(seq 100); do curl -sf http://127.0.0.1:8000/index.html && exit 0; sleep 0.1; done; exit 7");
  const listed = (await sbx.commands.list()).map((p) => p.pid);
  const attached = await sbx.commands.connect(server.pid);
  const killed = await sbx.commands.kill(server.pid);
  let exit = null;
  try {
    await attached.wait();
  } catch (e) {
    exit = { name: e.name, exitCode: e.exitCode, isCommandExit: e instanceof CommandExitError };
  }
  const after = (await sbx.commands.list()).map((p) => p.pid);
  return { pid: server.pid, fetched: fetched.stdout, listed, killed, exit, after };
});

// One sandbox for the sandbox's life: /tmp, a module in the user site
// (where pip install --user puts one) and a process one command left
// running are there for the next commands.
await step("persistent_sandbox", async () => {
  const run = async (cmd) => (await sbx.commands.run(cmd)).stdout.trim();
  await run("echo kept-in-tmp > /tmp/e2b-persist.txt");
  const tmp = await run("cat /tmp/e2b-persist.txt");
  await run(`d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p "$d" && echo 'X = "from-user-site"' > "$d/sgmod.py"`);
  const userSite = await run(`python3 -c 'import sgmod; print(sgmod.X)'`);
  const local = await run("ls -d ~/.local/lib");
  await run("nohup sleep 601 >/dev/null 2>&1 &");
  const ps = await run("ps -eo args");
  return { tmp, userSite, local, psSeesSleep: ps.split("\n").some((l) => l.trim() === "sleep 601") };
});

// A background command's input: sendStdin, then its output.
await step("stdin", async () => {
  const h = await sbx.commands.run("read -r line; echo got:$line", { background: true, stdin: true });
  await sbx.commands.sendStdin(h.pid, "typed over e2b\n");
  const res = await h.wait();
  return { stdout: res.stdout, exitCode: res.exitCode };
});

// Metrics while a command runs: its container's cgroup readings.
await step("metrics", async () => {
  let ready;
  const isReady = new Promise((r) => { ready = r; });
  const busy = await sbx.commands.run(
    "python3 -c 'b = bytearray(64 << 20); print(\"ready\", flush=True); import time; time.sleep(30)'",
    { background: true, timeoutMs: 0, onStdout: (d) => d.includes("ready") && ready() });
  busy.wait().catch(() => {});
  await isReady;
  const m = await sbx.getMetrics();
  await sbx.commands.kill(busy.pid);
  return m.map((x) => ({ ...x, timestamp: x.timestamp.toISOString() }));
});

await step("set_timeout", async () => {
  await sbx.setTimeout(600_000);
  const info = await sbx.getInfo();
  return { endAt: info.endAt.toISOString(), startedAt: info.startedAt.toISOString(), templateId: info.templateId,
    state: info.state };
});

await step("list", async () => {
  const items = await Sandbox.list().nextItems();
  return items.map((s) => s.sandboxId);
});

// --- the code interpreter: a DataFrame and a chart.
const ci = await CodeInterpreter.create();
report.interpreter_id = ci.sandboxId;
await step("run_code_dataframe", async () => {
  const ex = await ci.runCode("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': [4, 5, 6]})\nprint('sum', int(df['a'].sum()))\ndf");
  return { text: ex.text ?? null, stdout: ex.logs.stdout, formats: ex.results.map((r) => r.formats()),
    html: ex.results.some((r) => (r.html ?? "").includes("<table")), error: ex.error ?? null,
    executionCount: ex.executionCount };
});
await step("run_code_chart", async () => {
  const ex = await ci.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('e2b chart')\nplt.show()");
  const png = ex.results.find((r) => r.png);
  return { png: png ? png.png.replace(/\s/g, "") : null, formats: ex.results.map((r) => r.formats()), error: ex.error ?? null };
});
await step("run_code_state_and_error", async () => {
  const kept = await ci.runCode("int(df['b'].sum())");
  const failed = await ci.runCode("1/0");
  return { kept: kept.text ?? null, error: failed.error ? { name: failed.error.name, value: failed.error.value,
    traceback: failed.error.traceback.length > 0 } : null };
});
await step("run_code_denied", async () => {
  const ex = await ci.runCode("import os\nos.system('rm -rf /')");
  return { error: ex.error ? { name: ex.error.name, value: ex.error.value } : null, results: ex.results.length };
});
await step("contexts", async () => {
  const c = await ci.createCodeContext();
  const listed = await ci.listCodeContexts();
  const ran = await ci.runCode("int(df['a'].max())", { context: c });
  return { id: c.id, listed: listed.map((x) => x.id), text: ran.text ?? null };
});

// --- kill, twice: the second is false.
await step("kill", async () => {
  const first = await sbx.kill();
  const running = await sbx.isRunning();
  const second = await Sandbox.kill(sbx.sandboxId);
  const ci1 = await ci.kill();
  return { first, running, second, ci: ci1 };
});

process.stdout.write(JSON.stringify(report));
