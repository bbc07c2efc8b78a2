import assert from "node:assert/strict";
import { test } from "node:test";

import {
  axisSize, estimateWidth, isDecade, linearLabels, logGridSplits, logLabel, tickLabels,
} from "../static/js/axis_ticks.js";

/** uPlot's log10 splits from 10^lo to 10^hi: 1..9 × each decade. */
function logSplits(lo, hi) {
  const out = [];
  for (let e = lo; e < hi; e += 1) {
    for (let m = 1; m < 10; m += 1) out.push(Number(`${m}e${e}`));
  }
  out.push(Number(`1e${hi}`));
  return out;
}

test("decades are recognised, floating noise included", () => {
  assert.ok(isDecade(1e-6));
  assert.ok(isDecade(0.001));
  assert.ok(isDecade(1));
  assert.ok(isDecade(1e5));
  assert.ok(isDecade(10 ** -24));
  assert.ok(!isDecade(2e-6));
  assert.ok(!isDecade(0));
  assert.ok(!isDecade(-10));
});

test("log labels: decades plainly from 0.001 to 10,000, else 1e-6", () => {
  assert.equal(logLabel(1e-6), "1e-6");
  assert.equal(logLabel(1e-4), "1e-4");
  assert.equal(logLabel(0.001), "0.001");
  assert.equal(logLabel(0.01), "0.01");
  assert.equal(logLabel(1), "1");
  assert.equal(logLabel(100), "100");
  assert.equal(logLabel(1e5), "1e5");
  assert.equal(logLabel(2.5e-4), "2.5e-4");
  assert.equal(logLabel(5e-7), "5e-7");
});

test("a log axis over several decades labels the decades only, each in full", () => {
  const splits = logSplits(-6, -2);
  const labels = tickLabels(splits, true);
  assert.deepEqual(labels.filter((l) => l !== null), ["1e-6", "1e-5", "1e-4", "0.001", "0.01"]);
  assert.ok(labels.every((l) => l === null || !l.startsWith(".")));
});

test("a log axis within a decade labels what uPlot left labelled", () => {
  assert.deepEqual(tickLabels([2e-4, null, 5e-4, null, null, null, null, 1e-3], true),
    ["2e-4", null, "5e-4", null, null, null, null, "0.001"]);
});

test("the log grid keeps one line per decade over three decades or more", () => {
  const grid = logGridSplits(logSplits(-6, -2));
  assert.deepEqual(grid.filter((v) => v !== null), [1e-6, 1e-5, 1e-4, 1e-3, 1e-2]);
  const narrow = logSplits(-3, -2);
  assert.deepEqual(logGridSplits(narrow), narrow);
});

test("linear labels share their decimals", () => {
  assert.deepEqual(linearLabels([0, 0.5, 1, 1.5]), ["0", "0.5", "1.0", "1.5"]);
  assert.deepEqual(linearLabels([0.1, 0.2, 0.30000000000000004]), ["0.1", "0.2", "0.3"]);
  assert.deepEqual(linearLabels([0, 2000, 4000, 6000]), ["0", "2,000", "4,000", "6,000"]);
  assert.deepEqual(linearLabels([0.01, 0.015, 0.02]), ["0.010", "0.015", "0.020"]);
});

test("small and huge linear values are written 2.5e-4, never cut to .000e-4", () => {
  const labels = linearLabels([0, 2.5e-4, 5e-4, 7.5e-4]);
  assert.deepEqual(labels, ["0", "2.5e-4", "5e-4", "7.5e-4"]);
  assert.deepEqual(linearLabels([1e-6, 2e-6, 3e-6]), ["1e-6", "2e-6", "3e-6"]);
  assert.deepEqual(linearLabels([2e6, 4e6]), ["2e6", "4e6"]);
  assert.deepEqual(linearLabels([-5e-5, 0, 5e-5]), ["-5e-5", "0", "5e-5"]);
  assert.deepEqual(linearLabels([1e-4, 1.25e-4, 1.5e-4]), ["1e-4", "1.25e-4", "1.5e-4"]);
});

test("nulls stay null, and no labels is no labels", () => {
  assert.deepEqual(linearLabels([null, 1, 2]), [null, "1", "2"]);
  assert.deepEqual(tickLabels([], false), []);
});

test("the axis is as wide as its widest label, never narrower than 40px", () => {
  assert.equal(axisSize(null), 40);
  assert.equal(axisSize(["1", null]), 40);
  const wide = axisSize(["2.5e-4", "-1.25e-4"]);
  assert.equal(wide, estimateWidth("-1.25e-4") + 23);
  assert.ok(axisSize(["1e-6"], () => 100) >= 123);
});
