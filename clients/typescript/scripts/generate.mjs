// The client's copy of the contract and its types, from the repository's .proto files:
// proto/ (loaded at run time by @grpc/proto-loader) and src/gen (the message and
// service types, written by proto-loader-gen-types at the version package-lock.json
// pins).
//
//   node scripts/generate.mjs           rewrite both
//   node scripts/generate.mjs --check   fail if either differs from a fresh run
import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const protoRoot = join(here, "..", "..", "proto", "proto");
const files = ["reward/v1/event.proto", "reward/v1/agent.proto"];

function generate(out) {
  for (const f of files) {
    mkdirSync(dirname(join(out, "proto", f)), { recursive: true });
    cpSync(join(protoRoot, f), join(out, "proto", f));
  }
  execFileSync(
    join(here, "node_modules", ".bin", "proto-loader-gen-types"),
    [
      "reward/v1/agent.proto",
      "--grpcLib=@grpc/grpc-js",
      "--outDir=src/gen",
      "--keepCase",
      "--longs=Number",
      "--enums=String",
      "--defaults",
      "--oneofs",
      "--importFileExtension=.js",
      "--includeDirs=proto",
    ],
    // Run in `out` so the files name their sources by relative path.
    { cwd: out, stdio: ["ignore", "ignore", "inherit"] },
  );
}

function tree(dir) {
  const out = new Map();
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.set(relative(dir, p), readFileSync(p, "utf8"));
    }
  };
  walk(dir);
  return out;
}

const tmp = mkdtempSync(join(tmpdir(), "reward-agent-ts-"));
try {
  generate(tmp);
  if (process.argv.includes("--check")) {
    const stale = [];
    for (const part of ["proto", join("src", "gen")]) {
      const fresh = tree(join(tmp, part));
      let kept = new Map();
      try {
        kept = tree(join(here, part));
      } catch {
        // missing: every file is stale
      }
      for (const name of new Set([...fresh.keys(), ...kept.keys()])) {
        if (fresh.get(name) !== kept.get(name)) stale.push(join(part, name));
      }
    }
    if (stale.length > 0) {
      console.error(`stale: ${stale.join(", ")}; run \`npm run generate\``);
      process.exit(1);
    }
    console.log("proto/ and src/gen match the .proto files");
  } else {
    for (const part of ["proto", join("src", "gen")]) {
      rmSync(join(here, part), { recursive: true, force: true });
      cpSync(join(tmp, part), join(here, part), { recursive: true });
    }
    console.log("wrote proto/ and src/gen");
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
