// Unit tests of static/js/compare_controls.js (a Compare chart's anomaly positions
// and CSV) and the log axis's dropped values (axis_ticks.js) (`npm test`).
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { dropNonPositive, logScaleNote } from "../static/js/axis_ticks.js";
import { anomalyXs, compareCsv, pointOfStep } from "../static/js/compare_controls.js";
import { mergeRuns, runFromCompare } from "../static/js/compare_logic.js";

/** A run as compare_logic.js holds it, from a compact description. */
function run(jobId, steps, values, { x = steps, lastSteps = steps, min = values, max = values, smoothed } = {}) {
  const series = { "loss.a": smoothed ? { mean: values, min, max, smoothed } : { values } };
  if (min !== values && !smoothed) series["loss.a"] = { mean: values, min, max };
  return {
    ...runFromCompare({
      job_id: jobId, steps, last_steps: lastSteps, x_values: x,
      downsampled: lastSteps !== steps, series,
    }),
    label: jobId,
  };
}

describe("anomalyXs", () => {
  const timed = run("a", [0, 10, 20], [1, 2, 3], { x: [0, 5.5, 11], lastSteps: [9, 19, 29] });

  test("puts an anomaly at its step on the step axis, extra fields carried along", () => {
    const anomaly = { step: 12, end_step: 18, severity: "critical", type: "kl_spike", message: "m", extra: 1 };
    assert.deepEqual(anomalyXs(timed, [anomaly], "step"), [{ x: 12, anomaly }]);
  });

  test("on the time axis, at the x of the point holding its step", () => {
    const placed = anomalyXs(timed, [{ step: 12 }, { step: 29 }, { step: 0 }], "time");
    assert.deepEqual(placed.map((p) => p.x), [5.5, 11, 0]);
  });

  test("leaves out what it cannot place", () => {
    const noX = run("b", [0, 1], [1, 2], { x: [null, 3] });
    assert.deepEqual(anomalyXs(timed, [{ step: 30 }, { step: -1 }], "time"), []);
    assert.deepEqual(anomalyXs(noX, [{ step: 0 }], "tokens"), []);
    assert.deepEqual(anomalyXs(timed, [{ step: "7" }, null, { type: "x" }], "step"), []);
    assert.deepEqual(anomalyXs(timed, undefined, "step"), []);
  });

  test("pointOfStep finds the bucket holding a step", () => {
    assert.equal(pointOfStep(timed, 9), 0);
    assert.equal(pointOfStep(timed, 10), 1);
    assert.equal(pointOfStep(timed, 30), null);
  });
});

describe("compareCsv", () => {
  test("exact runs: x, then one column per run, empty where a run has no point", () => {
    const runs = [run("a", [0, 1, 2], [1, 2, 3]), run("b", [1, 2, 3], [5, 6, 7])];
    const csv = compareCsv(mergeRuns(runs, "loss.a"), runs);
    assert.equal(csv, "step,a,b\r\n0,1,\r\n1,2,5\r\n2,3,6\r\n3,,7\r\n");
  });

  test("only the zoomed range, with the time axis's column name", () => {
    const runs = [run("a", [0, 1, 2], [1, 2, 3], { x: [0, 1.5, 3] })];
    const csv = compareCsv(mergeRuns(runs, "loss.a"), runs, { mode: "time", range: [1, 3] });
    assert.equal(csv, "seconds_since_start,a\r\n1.5,2\r\n3,3\r\n");
  });

  test("a band wider than the line gets its min and max; smoothed lines are named so", () => {
    const bucketed = [run("a", [0, 10], [1, 2], { lastSteps: [9, 19], min: [0, 1], max: [3, 4] })];
    assert.equal(compareCsv(mergeRuns(bucketed, "loss.a"), bucketed),
      "step,a:mean,a:min,a:max\r\n0,1,0,3\r\n10,2,1,4\r\n");
    const smoothed = [run("s", [0, 1], [1, 3], { smoothed: [1, 2] })];
    assert.equal(compareCsv(mergeRuns(smoothed, "loss.a"), smoothed, { smoothed: true }),
      "step,s:smoothed,s:min,s:max\r\n0,1,1,1\r\n1,2,3,3\r\n");
  });

  test("quotes a job id that needs it", () => {
    const runs = [run("a,b", [0], [1])];
    assert.equal(compareCsv(mergeRuns(runs, "loss.a"), runs), 'step,"a,b"\r\n0,1\r\n');
  });
});

describe("dropNonPositive", () => {
  test("turns values <= 0 into gaps and counts the points that lost one", () => {
    const { groups, dropped } = dropNonPositive([[[1, 0, 2], [0.5, -1, 1]], [[null, 3, -2]]]);
    assert.deepEqual(groups, [[[1, null, 2], [0.5, null, 1]], [[null, 3, null]]]);
    assert.equal(dropped, 2);
    assert.equal(logScaleNote(dropped), "Log scale: values ≤ 0 at 2 points are not drawn.");
    assert.equal(logScaleNote(0), null);
  });
});
