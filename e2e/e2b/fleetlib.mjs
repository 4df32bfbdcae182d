// What the fleet scripts (fleet.mjs, failover.mjs) share: each replica as
// a ConnectionConfig of its own (apiUrl and sandboxUrl per call, as a
// client behind a round-robin balancer reaches them; SANDGATE_A, _B, _C
// are the replicas' base URLs), and a report of steps, each with its
// result or what it threw, printed as one JSON document on stdout.
export const at = (r) => {
  const u = process.env["SANDGATE_" + r] + "/e2b";
  return { apiUrl: u, sandboxUrl: u };
};

export const report = { steps: [] };

export async function step(name, fn) {
  try {
    report.steps.push({ step: name, result: await fn() });
  } catch (e) {
    report.steps.push({ step: name, thrown: { name: e?.name ?? "", message: String(e?.message ?? e) } });
  }
}
