// Shared by the tests: the scenarios every client runs (clients/conformance).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

// From dist/test/ (compiled) to clients/conformance/.
const PATH = fileURLToPath(new URL("../../../conformance/scenarios.json", import.meta.url));

export interface SceneCase {
  scene: string;
  activity_id: string;
  reward_type: string;
  user_id: string;
  round?: number;
  amount?: number;
  draw?: number;
  card_id?: string;
  show_start_ms?: number;
  slot_ms?: number;
  now_ms?: number;
  want: Record<string, unknown>;
}

export interface Scenarios {
  base: Record<string, unknown>;
  scenes: SceneCase[];
  bad_inputs: { name: string; set: Record<string, unknown>; code: string; field: string }[];
  batch: { size: number };
  over_batch: { size: number };
  kill: { rewards: number; batch: number; kill_after_batches: number; senders: number };
}

export function scenarios(): Scenarios {
  return JSON.parse(readFileSync(PATH, "utf8")) as Scenarios;
}
