// Drives one E2B sandbox through the three replicas of a sandgate fleet
// with the unmodified E2B SDK: each replica is a ConnectionConfig of its
// own (apiUrl and sandboxUrl per call, as a client behind a round-robin
// balancer would reach them). The key is E2B_API_KEY; SANDGATE_A, _B, _C
// are the replicas' base URLs. Prints one JSON report on stdout: each
// step's result, or what it threw. e2e/e2b_fleet_test.go checks it.
import { Sandbox } from "e2b";

import { at, report, step } from "./fleetlib.mjs";

// Created on A; the same sandbox connected through B and C.
const a = await Sandbox.create(at("A"));
report.sandbox_id = a.sandboxId;
const b = await Sandbox.connect(a.sandboxId, at("B"));
const c = await Sandbox.connect(a.sandboxId, at("C"));

await step("run_on_b", async () => (await b.commands.run("echo $((6*7)) > /tmp/fleet.txt; cat /tmp/fleet.txt")).stdout);
// /tmp is the session sandbox's: C's command sees what B's wrote.
await step("tmp_on_c", async () => (await c.commands.run("cat /tmp/fleet.txt")).stdout);
await step("files_c_to_a_b", async () => {
  await c.files.write("/home/user/fleet.txt", "written through C\n");
  return { readOnA: await a.files.read("/home/user/fleet.txt"), catOnB: (await b.commands.run("cat fleet.txt")).stdout,
    listedOnB: (await b.files.list("/home/user")).map((e) => e.name) };
});
// A background command started through B is one process: listed through
// C, killed through A, gone for all.
await step("background", async () => {
  const h = await b.commands.run("sleep 300", { background: true });
  const onC = (await c.commands.list()).map((p) => p.pid);
  const killed = await a.commands.kill(h.pid);
  // A kill is a signal: the process leaves the list as it ends.
  let listedAfter = true;
  for (let i = 0; i < 50 && listedAfter; i++) {
    listedAfter = (await b.commands.list()).some((p) => p.pid === h.pid);
    if (listedAfter) await new Promise((r) => setTimeout(r, 200));
  }
  return { pid: h.pid, listedOnC: onC.includes(h.pid), killedOnA: killed, listedAfter };
});
await step("pause_resume", async () => {
  const paused = await c.pause();
  const state = (await Sandbox.getInfo(a.sandboxId, at("B"))).state;
  const runningWhilePaused = await b.isRunning();
  const again = await Sandbox.pause(a.sandboxId, at("A"));
  const r = await Sandbox.connect(a.sandboxId, at("B"));
  const stateAfter = (await Sandbox.getInfo(a.sandboxId, at("C"))).state;
  const file = (await r.commands.run("cat /home/user/fleet.txt")).stdout;
  return { paused, state, runningWhilePaused, pausedAgain: again, stateAfter, file };
});
await step("fork", async () => {
  const [child] = await Sandbox.fork(a.sandboxId, { ...at("C"), count: 1 });
  if (child instanceof Error) throw child;
  const read = await child.files.read("/home/user/fleet.txt");
  const distinct = child.sandboxId !== a.sandboxId;
  await child.kill();
  return { read, distinct };
});
await step("kill", async () => {
  const killed = await a.kill();
  return { killedOnA: killed, runningOnB: await b.isRunning(), runningOnC: await c.isRunning() };
});
await step("run_after_kill", async () => (await b.commands.run("echo still here")).stdout);

process.stdout.write(JSON.stringify(report));
