// Drives every BaseSandbox method that deepagents' file and execute tools
// call (write, read, readRaw, edit, ls, grep, glob, execute, delete,
// uploadFiles, downloadFiles) against a sandgate gateway, in one session,
// and prints one JSON document: the raw result of each step. It judges
// nothing; e2e/deepagents_test.go holds the expectations.
//
// Environment: SANDGATE_URL, SANDGATE_TOKEN (an agent token),
// SANDGATE_SESSION (a fresh session id).
import { SandgateSandbox } from "./sandgate-sandbox.mjs";

const APP = 'import os\nprint("hello from app")\nprint(os.getcwd())\n';
const UTIL = "def greet(name):\n    return f'hello {name}'\n";
const NOTES = "first line\nTODO: ship it\nlast line\n";

const enc = (s) => new TextEncoder().encode(s);
const dec = (b) => (b == null ? null : new TextDecoder().decode(b));

// Steps run in order; later ones rely on the files earlier ones made.
const steps = [
  ["write_app", (sb) => sb.write("/workspace/src/app.py", APP)],
  ["write_util", (sb) => sb.write("/workspace/src/lib/util.py", UTIL)],
  ["write_notes", (sb) => sb.write("/workspace/notes/todo.txt", NOTES)],
  ["upload_partial", (sb) => sb.uploadFiles([
    ["/workspace/data/points.csv", enc("x,y\n1,2\n")],
    ["/etc/sandgate-e2e-escape", enc("must not be written")],
  ])],
  ["read_app", (sb) => sb.read("/workspace/src/app.py")],
  ["read_slice", (sb) => sb.read("/workspace/notes/todo.txt", 1, 1)],
  ["read_missing", (sb) => sb.read("/workspace/no-such-file.txt")],
  ["edit_app", (sb) => sb.edit("/workspace/src/app.py", "hello from app", "hello from sandgate")],
  ["edit_no_match", (sb) => sb.edit("/workspace/src/app.py", "not in the file", "x")],
  ["read_raw_app", (sb) => sb.readRaw("/workspace/src/app.py")],
  ["ls_workspace", (sb) => sb.ls("/workspace")],
  ["ls_src", (sb) => sb.ls("/workspace/src")],
  ["grep_literal", (sb) => sb.grep("TODO:", "/workspace")],
  ["grep_glob", (sb) => sb.grep("sandgate", "/workspace", "*.py")],
  ["glob_recursive", (sb) => sb.glob("**/*.py", "/workspace")],
  ["glob_dir", (sb) => sb.glob("*.txt", "/workspace/notes")],
  ["execute_python", (sb) => sb.execute("python3 /workspace/src/app.py")],
  ["execute_cwd", (sb) => sb.execute("wc -l < notes/todo.txt")],
  ["execute_stderr_exit", (sb) => sb.execute("echo out; echo err >&2; exit 3")],
  ["execute_writes", (sb) => sb.execute("mkdir -p /workspace/out && printf 'made by code\\n' > /workspace/out/result.txt")],
  ["download", (sb) => sb.downloadFiles(["/workspace/out/result.txt", "/workspace/src/app.py", "/workspace/missing.bin"])],
  ["delete_file", (sb) => sb.delete("/workspace/notes/todo.txt")],
  ["delete_verify", (sb) => sb.downloadFiles(["/workspace/notes/todo.txt"])],
  ["delete_missing", (sb) => sb.delete("/workspace/notes/todo.txt")],
  ["delete_dir", (sb) => sb.delete("/workspace/out")],
  ["ls_after_delete", (sb) => sb.ls("/workspace")],
];

// plain makes a result JSON-friendly: bytes become UTF-8 text.
function plain(v) {
  if (v instanceof Uint8Array) return dec(v);
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === "object") {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}

async function main() {
  const { SANDGATE_URL: baseUrl, SANDGATE_TOKEN: token, SANDGATE_SESSION: sessionId } = process.env;
  if (!baseUrl || !token || !sessionId) {
    throw new Error("SANDGATE_URL, SANDGATE_TOKEN and SANDGATE_SESSION are required");
  }
  const sb = new SandgateSandbox({ baseUrl, token, sessionId });
  const results = [];
  for (const [name, fn] of steps) {
    const first = sb.calls.length;
    const rec = { step: name };
    try {
      rec.result = plain(await fn(sb));
    } catch (err) {
      rec.thrown = String(err?.message ?? err);
    }
    rec.calls = sb.calls.slice(first);
    results.push(rec);
  }
  process.stdout.write(JSON.stringify({ deepagents: await version(), steps: results }) + "\n");
}

async function version() {
  const { createRequire } = await import("node:module");
  return createRequire(import.meta.url)("deepagents/package.json").version;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
