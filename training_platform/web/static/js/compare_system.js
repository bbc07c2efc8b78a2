// The Compare view's System group (compare_view.js): run-level summaries of each
// run's system samples (`system.gpu_utilization`, the mean over every GPU of every
// host; `system.gpu_power_w`, their sum; ... docs/contract.md). A run's compare entry
// names the ones it has (`system_series`); their points come from a second
// `GET /api/compare?fields=system`, asked only once a System chart is shown, each
// run's on its own x (its samples', not its records'), so they are kept as a column
// store per run beside the metrics' and drawn by the same chart (compare_chart.js).
// No DOM here: unit-tested under Node (tests/compare_system.test.js).

import { runFromCompare } from "./compare_logic.js";
import { buildQuery } from "./url_state.js";

export const SYSTEM_PREFIX = "system.";

/** Whether a chart's key is a System series (drawn from the system points). */
export function isSystemKey(key) {
  return typeof key === "string" && key.startsWith(SYSTEM_PREFIX);
}

/** The System series any run of a compare answer has, sorted (none without samples). */
export function systemUnion(entries) {
  const keys = new Set();
  for (const entry of entries) for (const key of entry.system_series || []) keys.add(key);
  return [...keys].sort();
}

/** The `GET /api/compare` query for the System points of a state's runs. */
export function systemApiQuery(state, maxPoints) {
  return buildQuery([
    ["jobs", state.jobs],
    ["max_points", maxPoints === undefined ? null : String(maxPoints)],
    ["x", state.x === "step" ? null : state.x],
    ["fields", "system"],
  ]);
}

/**
 * The System points of each run of `runs` (the view's metric runs, for their label,
 * colour and status), from the answer `body` of `systemApiQuery`: a column store per
 * run, as `runFromCompare` makes, in `runs` order; a run without samples has an
 * empty one (the chart then says it has none).
 */
export function systemRuns(runs, body) {
  const byJob = new Map((body.jobs || []).map((entry) => [entry.job_id, entry.system]));
  return runs.map((run) => {
    const system = byJob.get(run.jobId) || { steps: [], series: {} };
    const store = runFromCompare({ ...system, job_id: run.jobId });
    return {
      ...store, label: run.label, color: run.color, name: run.name, project: run.project,
      status: run.status, health: run.health, timeOrigin: run.timeOrigin,
    };
  });
}
