// Drives one Daytona sandbox through the three replicas of a sandgate
// fleet with the unmodified Daytona SDK, its quickstart's calls spread
// over them: one client per replica (apiUrl), the key DAYTONA_API_KEY;
// SANDGATE_A, _B, _C are the replicas' base URLs. Prints one JSON report
// on stdout. e2e/e2b_fleet_test.go checks it.
import { Daytona } from "@daytonaio/sdk";

const client = (r) => new Daytona({ apiUrl: process.env["SANDGATE_" + r] + "/daytona", apiKey: process.env.DAYTONA_API_KEY });
const [A, B, C] = [client("A"), client("B"), client("C")];
const report = { steps: [] };

async function step(name, fn) {
  try {
    report.steps.push({ step: name, result: await fn() });
  } catch (e) {
    report.steps.push({ step: name, thrown: { name: e?.constructor?.name ?? "", message: String(e?.message ?? e), statusCode: e?.statusCode } });
  }
}

const onA = await A.create({ language: "python" });
report.sandbox_id = onA.id;
const onB = await B.get(onA.id);
const onC = await C.get(onA.id);

await step("code_run_on_b", async () => (await onB.process.codeRun('print("hello from B")')).result);
await step("execute_on_c", async () => (await onC.process.executeCommand("echo from-c > c.txt; cat c.txt")).result);
await step("files", async () => {
  await onB.fs.uploadFile(Buffer.from("uploaded through B\n"), "b.txt");
  return { downloadOnA: (await onA.fs.downloadFile("b.txt")).toString(), catOnC: (await onC.process.executeCommand("cat b.txt")).result,
    listedOnA: (await onA.fs.listFiles(".")).map((f) => f.name), madeOnC: (await onA.fs.downloadFile("c.txt")).toString() };
});
await step("delete_on_c", async () => {
  await onC.delete();
  let gone = null;
  try {
    await B.get(onA.id);
  } catch (e) {
    gone = { name: e?.constructor?.name ?? "", statusCode: e?.statusCode };
  }
  return { gone };
});

for (const d of [A, B, C]) await d[Symbol.asyncDispose]();
process.stdout.write(JSON.stringify(report) + "\n");
