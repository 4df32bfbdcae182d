// Summarise a JSON log file: a realistic agent-written Node script.
"use strict";
const fs = require("fs");
const path = require("path");

const LEVELS = ["debug", "info", "warn", "error"];
const WINDOW_MS = 60 * 60 * 1000;

function parseLine(line, lineNo) {
  if (!line.trim()) return null;
  try {
    const entry = JSON.parse(line);
    if (!LEVELS.includes(entry.level)) {
      return null;
    }
    return { ...entry, ts: Date.parse(entry.time), lineNo };
  } catch (err) {
    console.warn(`line ${lineNo}: ${err.message}`);
    return null;
  }
}

function load(file) {
  const text = fs.readFileSync(file, "utf8");
  return text
    .split("\n")
    .map((line, i) => parseLine(line, i + 1))
    .filter(Boolean);
}

function bucket(entries, now) {
  const counts = new Map();
  const byService = {};
  for (const e of entries) {
    if (now - e.ts > WINDOW_MS) continue;
    counts.set(e.level, (counts.get(e.level) || 0) + 1);
    const svc = e.service || "unknown";
    byService[svc] = byService[svc] || { total: 0, errors: 0, latencies: [] };
    byService[svc].total += 1;
    if (e.level === "error") byService[svc].errors += 1;
    if (typeof e.latency_ms === "number") byService[svc].latencies.push(e.latency_ms);
  }
  return { counts, byService };
}

function percentile(values, p) {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length));
  return sorted[idx];
}

function report({ counts, byService }) {
  const rows = Object.entries(byService).map(([name, s]) => ({
    name,
    total: s.total,
    errorRate: s.total ? +(s.errors / s.total).toFixed(3) : 0,
    p50: percentile(s.latencies, 50),
    p95: percentile(s.latencies, 95),
    p99: percentile(s.latencies, 99),
  }));
  rows.sort((a, b) => b.errorRate - a.errorRate || b.total - a.total);
  const levels = Object.fromEntries(LEVELS.map((l) => [l, counts.get(l) || 0]));
  return { generatedAt: new Date().toISOString(), levels, services: rows };
}

function render(rep) {
  const lines = [];
  lines.push(`Generated ${rep.generatedAt}`);
  for (const [level, n] of Object.entries(rep.levels)) {
    lines.push(`${level.padEnd(6)} ${String(n).padStart(6)}`);
  }
  lines.push("");
  lines.push("service              total  err%    p50    p95    p99");
  for (const r of rep.services) {
    lines.push(
      [
        r.name.padEnd(20),
        String(r.total).padStart(6),
        (r.errorRate * 100).toFixed(1).padStart(5),
        String(r.p50).padStart(6),
        String(r.p95).padStart(6),
        String(r.p99).padStart(6),
      ].join(" ")
    );
  }
  return lines.join("\n");
}

function main(argv) {
  const file = argv[2] || "app.log";
  const outDir = argv[3] || "out";
  const entries = load(file);
  const rep = report(bucket(entries, Date.now()));
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, "report.json"), JSON.stringify(rep, null, 2));
  console.log(render(rep));
  return 0;
}

if (require.main === module) {
  process.exitCode = main(process.argv);
}

module.exports = { parseLine, bucket, percentile, report, render };
