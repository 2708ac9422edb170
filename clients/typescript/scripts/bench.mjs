// Sends rewards through an agent as fast as BENCH_CONCURRENCY concurrent senders can,
// one reward a call, and writes the rate and the call latencies to
// CONFORMANCE_OUT/typescript.bench.json; every answered reward is also appended to
// CONFORMANCE_OUT/typescript.bench.sent.tsv for the books. Run (after `npm run build`) by
// agent/tests/clients.rs with REWARD_CLIENTS_BENCH set (the variables of
// clients/conformance/README.md, plus BENCH_REWARDS and BENCH_CONCURRENCY).
import { appendFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";

import { AgentClient, RedEnvelopeRain } from "../dist/src/index.js";

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`bench.mjs: ${name} is not set`);
    process.exit(2);
  }
  return v;
}

const tag = `${need("CONFORMANCE_TAG")}-typescript`;
const out = need("CONFORMANCE_OUT");
const n = Number(process.env.BENCH_REWARDS ?? "10000");
const workers = Number(process.env.BENCH_CONCURRENCY ?? "16");
const agent = AgentClient.unix(need("REWARD_AGENT_SOCKET"), { timeoutMs: 30_000 });
const rain = new RedEnvelopeRain(tag, "cash");
const lat = new Array(n);
const issued = new Array(n);
let next = 0;
const start = performance.now();
await Promise.all(
  Array.from({ length: workers }, async () => {
    for (let i = next++; i < n; i = next++) {
      const t = performance.now();
      issued[i] = await agent.sendSettled(rain.grab({ userId: `b${i}` }, 1, 5), 30_000);
      lat[i] = performance.now() - t;
    }
  }),
);
const secs = (performance.now() - start) / 1000;
agent.close();
const now = Date.now();
appendFileSync(
  join(out, "typescript.bench.sent.tsv"),
  issued
    .map(
      (r, i) =>
        [r.tradeNo, `b${i}`, tag, "rain", "cash", 5, now, r.heldBy === "store" ? 1 : 0, 0, r.token].join(
          "\t",
        ) + "\n",
    )
    .join(""),
);
lat.sort((a, b) => a - b);
const report = {
  lang: "typescript",
  rewards: n,
  concurrency: workers,
  secs,
  rate: n / secs,
  p50_ms: lat[Math.floor(0.5 * (n - 1))],
  p99_ms: lat[Math.floor(0.99 * (n - 1))],
};
writeFileSync(join(out, "typescript.bench.json"), JSON.stringify(report));
console.log(JSON.stringify(report));
