// Drives sandgate's Daytona front end (/daytona) with the unmodified
// Daytona SDK, as its quickstart does, configured only through the SDK's
// own environment variables (DAYTONA_API_KEY, DAYTONA_API_URL), and prints
// one JSON report on stdout: each step's result, or what it threw (the
// error's class, message, status and code). e2e/daytona_test.go starts a
// STRICT gateway, approves the HIGH command over REST while it is held,
// and checks the report and the audit.
//
// The quickstart followed: "create a sandbox, run code, execute a command,
// upload and download a file, list and delete files, delete the sandbox".
import { readFileSync } from "node:fs";
import { Daytona, DaytonaError } from "@daytonaio/sdk";

// The commands; keep them in step with the checks in e2e/daytona_test.go.
// HIGH: the command name is built at run time, so the policy asks a human.
const HIGH = "c=ec; ${c}ho approved-over-daytona";
// CRITICAL: never runs in STRICT.
const CRITICAL = "rm -rf /";

const version = (p) => JSON.parse(readFileSync(new URL(`./node_modules/${p}/package.json`, import.meta.url))).version;
const report = { sdk: { "@daytonaio/sdk": version("@daytonaio/sdk") }, steps: [] };

const thrown = (e) => ({ name: e?.constructor?.name ?? e?.name ?? "", message: String(e?.message ?? e),
  statusCode: e?.statusCode, code: e?.code, isDaytonaError: e instanceof DaytonaError });

async function step(name, fn) {
  try {
    report.steps.push({ step: name, result: await fn() });
  } catch (e) {
    report.steps.push({ step: name, thrown: thrown(e) });
  }
}

const daytona = new Daytona();
const sandbox = await daytona.create({ language: "python" });
report.sandbox_id = sandbox.id;

await step("create", async () => ({ id: sandbox.id, state: sandbox.state, toolboxProxyUrl: sandbox.toolboxProxyUrl,
  language: sandbox.labels?.["code-toolbox-language"] ?? null, workDir: await sandbox.getWorkDir() }));

await step("get_and_list", async () => {
  const got = await daytona.get(sandbox.id);
  const listed = [];
  for await (const s of daytona.list()) listed.push(s.id);
  return { id: got.id, state: got.state, listed };
});

await step("code_run", async () => {
  const res = await sandbox.process.codeRun('print("Hello World from code!")');
  return { exitCode: res.exitCode, result: res.result };
});

await step("execute", async () => {
  const res = await sandbox.process.executeCommand('echo "Hello World from exec!"; pwd; echo to-stderr >&2');
  await sandbox.process.executeCommand("mkdir -p sub");
  const inDir = await sandbox.process.executeCommand("pwd; echo $GREETING", "sub", { GREETING: "hi from env" });
  const failed = await sandbox.process.executeCommand("echo failing; exit 3");
  return { exitCode: res.exitCode, result: res.result, stdout: res.artifacts.stdout, inDir: inDir.result,
    failedExit: failed.exitCode, failedResult: failed.result };
});

await step("files", async () => {
  const data = "written through the daytona sdk\n";
  await sandbox.fs.uploadFile(Buffer.from(data), "data.txt");
  await sandbox.fs.uploadFile(Buffer.from("nested\n"), "/home/daytona/sub/nested.txt");
  const back = (await sandbox.fs.downloadFile("data.txt")).toString();
  const nested = (await sandbox.fs.downloadFile("/workspace/sub/nested.txt")).toString();
  const seenByCommand = (await sandbox.process.executeCommand("cat data.txt")).result;
  const written = (await sandbox.process.executeCommand("echo from-command > made.txt")).exitCode;
  const made = (await sandbox.fs.downloadFile("made.txt")).toString();
  await sandbox.fs.createFolder("new-dir", "755");
  const listed = (await sandbox.fs.listFiles(".")).map((f) => ({ name: f.name, isDir: f.isDir, size: f.size }));
  await sandbox.fs.deleteFile("data.txt");
  let gone = null;
  try {
    await sandbox.fs.downloadFile("data.txt");
  } catch (e) {
    gone = thrown(e);
  }
  const after = (await sandbox.fs.listFiles(".")).map((f) => f.name);
  return { back, nested, seenByCommand, written, made, listed, gone, after };
});

await step("high_held_then_approved", async () => {
  const t0 = Date.now();
  const res = await sandbox.process.executeCommand(HIGH);
  return { exitCode: res.exitCode, result: res.result, waitedMs: Date.now() - t0 };
});

await step("critical_denied", async () => {
  try {
    const res = await sandbox.process.executeCommand(CRITICAL);
    return { thrown: false, exitCode: res.exitCode };
  } catch (e) {
    return { thrown: true, ...thrown(e) };
  }
});

await step("code_run_denied", async () => {
  try {
    const res = await sandbox.process.codeRun("import os\nos.system('rm -rf /')");
    return { thrown: false, exitCode: res.exitCode };
  } catch (e) {
    return { thrown: true, ...thrown(e) };
  }
});

await step("delete", async () => {
  await sandbox.delete();
  let again = null;
  try {
    await daytona.get(sandbox.id);
  } catch (e) {
    again = thrown(e);
  }
  return { state: sandbox.state, again };
});

await daytona[Symbol.asyncDispose]();
process.stdout.write(JSON.stringify(report) + "\n");
