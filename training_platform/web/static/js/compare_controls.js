// The pure parts of a Compare chart's controls (compare_chart.js): where each run's
// anomalies go on the chart's x axis, and the CSV of what the chart shows. No DOM:
// unit-tested under Node (tests/compare_controls.test.js).

import { csvField } from "./series.js";

/** The CSV's first column for each x axis (compare_logic.js, X_MODES). */
export const X_COLUMNS = { step: "step", time: "seconds_since_start", tokens: "tokens" };

/**
 * The point of `run` (a column store, compare_logic.js) that holds `step`: the last
 * whose first step is at or before it; null when the step is outside the run's data.
 */
export function pointOfStep(run, step) {
  const n = run.steps.length;
  if (!n || step < run.steps[0] || step > run.lastSteps[n - 1]) return null;
  let lo = 0;
  let hi = n - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (run.steps[mid] <= step) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * The anomalies of a run placed on the x axis `mode`: `[{x, anomaly}]`. On the step
 * axis at their step; on the time and token axes at the x of the run's point that
 * holds their step (left out when the run has no point there, or no x for it: a
 * position there would be a guess). Anything without a numeric step is skipped,
 * and extra fields (an `end_step`, ...) are carried along untouched.
 */
export function anomalyXs(run, anomalies, mode) {
  const placed = [];
  for (const anomaly of anomalies || []) {
    if (!anomaly || typeof anomaly.step !== "number" || !Number.isFinite(anomaly.step)) continue;
    if (mode === "step") {
      placed.push({ x: anomaly.step, anomaly });
      continue;
    }
    const i = pointOfStep(run, anomaly.step);
    const x = i === null ? null : run.x[i];
    if (x !== null && x !== undefined) placed.push({ x, anomaly });
  }
  return placed;
}

/**
 * What a Compare chart shows as CSV: its x (`step`, `seconds_since_start` or
 * `tokens`), then per run (by job id) its line, and, when the run's band is wider
 * than its line anywhere (downsampled buckets), the band's `:min` and `:max`. The
 * line is `<job>:smoothed` when smoothed, `<job>:mean` beside a band, else `<job>`.
 * Only the x range [lo, hi] when `range` is given; a missing value is an empty field.
 *
 * @param merged  mergeRuns(runs, key) (compare_logic.js)
 * @param runs    the runs, in merged's order, each with `jobId`
 */
export function compareCsv(merged, runs, { mode = "step", smoothed = false, range = null } = {}) {
  const header = [X_COLUMNS[mode] || "x"];
  const columns = [];
  runs.forEach((run, r) => {
    const points = merged.perRun[r];
    const band = points.present.some((i) => points.min[i] !== points.max[i]
      || (smoothed && points.min[i] !== points.line[i]));
    let name = run.jobId;
    if (smoothed) name += ":smoothed";
    else if (band) name += ":mean";
    header.push(name);
    columns.push(points.line);
    if (band) {
      header.push(`${run.jobId}:min`, `${run.jobId}:max`);
      columns.push(points.min, points.max);
    }
  });
  const lines = [header.map(csvField).join(",")];
  merged.xs.forEach((x, i) => {
    if (range && (x < range[0] || x > range[1])) return;
    lines.push([x, ...columns.map((column) => column[i] ?? "")].map(csvField).join(","));
  });
  return `${lines.join("\r\n")}\r\n`;
}
