// The E2B half of e2e/e2b_fleet_test.go's failover: with FAILOVER_PHASE=
// start, makes a sandbox on replica A, writes a file and leaves a
// background command running, and reports its id and pid; the test then
// kills A (SIGKILL). With FAILOVER_PHASE=after (SANDBOX_ID and PID set),
// connects through B, which adopts the session: the file is there, a
// command runs, and the background command, which lived in A's memory,
// is reported gone (not_found), never a second copy. Prints one JSON
// report on stdout.
import { Sandbox } from "e2b";

import { at, report, step } from "./fleetlib.mjs";

if (process.env.FAILOVER_PHASE === "start") {
  const a = await Sandbox.create(at("A"));
  report.sandbox_id = a.sandboxId;
  await a.files.write("/home/user/survives.txt", "written before the failover\n");
  const h = await a.commands.run("sleep 300", { background: true });
  report.pid = h.pid;
} else {
  const id = process.env.SANDBOX_ID, pid = Number(process.env.PID);
  report.sandbox_id = id;
  const b = await Sandbox.connect(id, at("B"));
  await step("file_survives", async () => (await b.files.read("/home/user/survives.txt")));
  await step("command_runs", async () => (await b.commands.run("cat survives.txt")).stdout);
  await step("process_gone", async () => {
    const listed = (await b.commands.list()).some((p) => p.pid === pid);
    let connect = null;
    try {
      await b.commands.connect(pid);
    } catch (e) {
      connect = { name: e?.name ?? "", message: String(e?.message ?? e) };
    }
    return { listed, connect };
  });
  await step("kill", async () => await Sandbox.kill(id, at("C")));
}
process.stdout.write(JSON.stringify(report));
