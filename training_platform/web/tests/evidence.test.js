import assert from "node:assert/strict";
import { test } from "node:test";

import { evidenceRows, evidenceValue } from "../static/js/evidence.js";

test("flat numbers become rows with readable keys and a few digits", () => {
  assert.deepEqual(evidenceRows({ share: 0.612345678, threshold: 0.5, stage: "rollout" }),
    [["share", "0.6123"], ["threshold", "0.5"], ["stage", "rollout"]]);
});

test("a nested dict reads as key value pairs, no JSON", () => {
  const rows = evidenceRows({
    per_step: 12, sync_time_share: 0.0712, thresholds: { per_step: 5, time_share: 0.05 },
  });
  assert.deepEqual(rows, [
    ["per step", "12"], ["sync time share", "0.0712"], ["thresholds", "per step 5, time share 0.05"],
  ]);
  assert.ok(rows.every(([, text]) => !/[{}"]/.test(text)));
});

test("lists are joined short, or counted", () => {
  assert.equal(evidenceValue(["rollout"]), "rollout");
  assert.equal(evidenceValue([1, 2, 3, 4, 5, 6]), "1, 2, 3, 4 (+2 more)");
  assert.equal(evidenceValue([]), "none");
  assert.equal(evidenceValue([{ stage: "reward", ratio: 2.5 }, { stage: "update", ratio: 3 }]),
    "stage reward, ratio 2.5 | stage update, ratio 3");
  // Deep nesting is counted, never dumped.
  assert.equal(evidenceValue({ fits: { rss: { slope: 1, leak: true } } }), "fits rss 2 values");
  assert.equal(evidenceValue({ a: [[1, 2]] }), "a 2 items");
});

test("null, booleans and non-dict evidence", () => {
  assert.deepEqual(evidenceRows(null), []);
  assert.deepEqual(evidenceRows({ seconds: null, leak: false }), [["seconds", "–"], ["leak", "no"]]);
  assert.deepEqual(evidenceRows([1, 2]), [["evidence", "1, 2"]]);
  assert.equal(evidenceValue(3e-5), "3.000e-5");
});
