// Unit tests of static/js/samples_logic.js (`npm test`, docs/dashboard.md): the
// Samples panel's queries, cells, step list and chart-click-to-step mapping.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  componentCells,
  defaultFilters,
  describeStep,
  filtersActive,
  finishReasonOptions,
  groupByStep,
  indexOfStep,
  isSamplesAnomaly,
  lengthCell,
  mergeStepStats,
  nearestStep,
  parseBound,
  previewLine,
  promptQuery,
  rewardCell,
  samplesQuery,
  stepOfPoint,
  stepsQuery,
} from "../static/js/samples_logic.js";

const params = (query) => Object.fromEntries(new URLSearchParams(query));

describe("samplesQuery", () => {
  test("no filters: the step, sorted by step ascending, a page of 100", () => {
    assert.deepEqual(params(samplesQuery(defaultFilters(), { step: 12 })),
      { step: "12", sort: "step", order: "asc", limit: "100" });
  });

  test("every filter is sent, trimmed; empty ones are left out", () => {
    const filters = {
      ...defaultFilters(), group: " p-0017 ", finishReason: "length", minReward: "0.5",
      maxReward: "", q: "  answer is ", sort: "reward", order: "desc",
    };
    assert.deepEqual(params(samplesQuery(filters, { step: 3, cursor: "abc=", limit: 50 })), {
      step: "3", group: "p-0017", finish_reason: "length", min_reward: "0.5",
      q: "answer is", sort: "reward", order: "desc", limit: "50", cursor: "abc=",
    });
  });

  test("bounds that are not numbers are left out; negative and zero are kept", () => {
    const filters = { ...defaultFilters(), minReward: "abc", maxReward: "0" };
    assert.deepEqual(params(samplesQuery(filters, { step: 0 })),
      { step: "0", max_reward: "0", sort: "step", order: "asc", limit: "100" });
    assert.equal(params(samplesQuery({ ...defaultFilters(), minReward: "-1.5" }, { step: 1 })).min_reward, "-1.5");
  });

  test("scope run drops the step", () => {
    const query = params(samplesQuery({ ...defaultFilters(), scope: "run" }, { step: 7 }));
    assert.equal(query.step, undefined);
  });

  test("an unknown sort falls back to step; a search is URL-encoded", () => {
    const query = samplesQuery({ ...defaultFilters(), sort: "bogus", q: "a&b=<c> d" }, { step: 1 });
    assert.equal(params(query).sort, "step");
    assert.equal(params(query).q, "a&b=<c> d");
    assert.ok(!query.includes("<"));
  });
});

describe("promptQuery and stepsQuery", () => {
  test("a prompt across the run, by step", () => {
    assert.deepEqual(params(promptQuery("ab12")), { prompt: "ab12", sort: "step", order: "asc", limit: "200" });
    assert.equal(params(promptQuery("ab12", { cursor: "c1" })).cursor, "c1");
  });

  test("steps: either end open", () => {
    assert.equal(stepsQuery(), "");
    assert.deepEqual(params(stepsQuery({ startStep: 0, endStep: 9 })), { start_step: "0", end_step: "9" });
    assert.deepEqual(params(stepsQuery({ startStep: 5 })), { start_step: "5" });
  });
});

describe("filters", () => {
  test("parseBound", () => {
    assert.equal(parseBound(""), null);
    assert.equal(parseBound("  "), null);
    assert.equal(parseBound("1e-3"), 0.001);
    assert.equal(parseBound("NaN"), null);
    assert.equal(parseBound("Infinity"), null);
    assert.equal(parseBound(null), null);
  });

  test("filtersActive: sorting and scope do not count", () => {
    assert.equal(filtersActive(defaultFilters()), false);
    assert.equal(filtersActive({ ...defaultFilters(), sort: "reward", order: "desc", scope: "run" }), false);
    assert.equal(filtersActive({ ...defaultFilters(), q: "x" }), true);
    assert.equal(filtersActive({ ...defaultFilters(), minReward: "0" }), true);
    assert.equal(filtersActive({ ...defaultFilters(), finishReason: "length" }), true);
  });

  test("finish reasons: stop and length first, then others seen, once each", () => {
    assert.deepEqual(finishReasonOptions([null, "length", "abort", "stop", "abort"]), ["stop", "length", "abort"]);
  });
});

describe("cells", () => {
  test("rewardCell: numbers formatted, the API's non-finite strings shown as such", () => {
    assert.deepEqual(rewardCell(1), { text: "1", nonfinite: false, missing: false });
    assert.deepEqual(rewardCell(0.123456), { text: "0.1235", nonfinite: false, missing: false });
    assert.deepEqual(rewardCell("NaN"), { text: "NaN", nonfinite: true, missing: false });
    assert.deepEqual(rewardCell("-Infinity"), { text: "-Infinity", nonfinite: true, missing: false });
    assert.deepEqual(rewardCell(null), { text: "–", nonfinite: false, missing: true });
    assert.equal(rewardCell(Number.POSITIVE_INFINITY).nonfinite, true);
  });

  test("componentCells keep the logged order", () => {
    assert.deepEqual(componentCells({ format: 1, accuracy: "NaN" }), [
      { name: "format", text: "1", nonfinite: false, missing: false },
      { name: "accuracy", text: "NaN", nonfinite: true, missing: false },
    ]);
    assert.deepEqual(componentCells(null), []);
  });

  test("previewLine: one line, whitespace collapsed, cut with an ellipsis", () => {
    assert.equal(previewLine("a\n\n  b\tc "), "a b c");
    assert.equal(previewLine("x".repeat(10), 5), "xxxx…");
    assert.equal(previewLine(null), "");
    assert.equal(previewLine("<script>x</script>"), "<script>x</script>");
  });

  test("lengthCell: tokens, else characters", () => {
    assert.deepEqual(lengthCell({ response_length: 1234, length: 10 }), { text: "1,234", unit: "tokens" });
    assert.deepEqual(lengthCell({ response_length: null, length: 10 }), { text: "10", unit: "characters" });
    assert.deepEqual(lengthCell({}), { text: "–", unit: null });
  });

  test("describeStep: count, mean reward, truncated", () => {
    assert.equal(describeStep({ step: 3, count: 8, reward_mean: 0.625, truncated: 2 }),
      "8 samples · mean reward 0.625 · 2 truncated");
    assert.equal(describeStep({ step: 3, count: 1, reward_mean: "NaN", truncated: 0 }),
      "1 sample · mean reward NaN · 0 truncated");
    assert.equal(describeStep({ step: 3, count: 2, reward_mean: null, truncated: null }), "2 samples");
    assert.equal(describeStep(undefined), "");
  });
});

describe("steps", () => {
  const steps = [0, 10, 20, 35];

  test("nearestStep: exact, between (halfway: the earlier), outside", () => {
    assert.equal(nearestStep(steps, 10), 10);
    assert.equal(nearestStep(steps, 13), 10);
    assert.equal(nearestStep(steps, 17), 20);
    assert.equal(nearestStep(steps, 15), 10); // halfway: the earlier
    assert.equal(nearestStep(steps, -5), 0);
    assert.equal(nearestStep(steps, 1000), 35);
    assert.equal(nearestStep([7], 3), 7);
    assert.equal(nearestStep([], 3), null);
    assert.equal(nearestStep(steps, null), null);
  });

  test("indexOfStep", () => {
    assert.equal(indexOfStep(steps, 20), 2);
    assert.equal(indexOfStep(steps, 0), 0);
    assert.equal(indexOfStep(steps, 35), 3);
    assert.equal(indexOfStep(steps, 21), -1);
    assert.equal(indexOfStep([], 1), -1);
  });

  test("mergeStepStats: fresh stats replace theirs, new steps slot in order", () => {
    const merged = mergeStepStats(
      [{ step: 1, count: 2 }, { step: 5, count: 4 }],
      [{ step: 5, count: 8 }, { step: 3, count: 1 }, { step: 9, count: 1 }],
    );
    assert.deepEqual(merged, [{ step: 1, count: 2 }, { step: 3, count: 1 }, { step: 5, count: 8 }, { step: 9, count: 1 }]);
  });

  test("groupByStep: by step, then by index", () => {
    const grouped = groupByStep([
      { step: 4, index: 1 }, { step: 2, index: 3 }, { step: 4, index: 0 }, { step: 2, index: 0 },
    ]);
    assert.deepEqual(grouped.map((g) => [g.step, g.samples.map((s) => s.index)]), [[2, [0, 3]], [4, [0, 1]]]);
  });

  test("stepOfPoint: a point's step; within a bucket, the step under the cursor", () => {
    assert.equal(stepOfPoint(12, 12, 13.4), 12);
    assert.equal(stepOfPoint(100, 199, 150.4), 150);
    assert.equal(stepOfPoint(100, 199, 90), 100);
    assert.equal(stepOfPoint(100, 199, 250), 199);
    assert.equal(stepOfPoint(100, 199, null), 100);
  });
});

describe("isSamplesAnomaly", () => {
  test("source samples, or samples among the sources", () => {
    assert.equal(isSamplesAnomaly({ source: "samples" }), true);
    assert.equal(isSamplesAnomaly({ source: "platform", sources: ["platform", "samples"] }), true);
    assert.equal(isSamplesAnomaly({ source: "platform", sources: ["platform"] }), false);
    assert.equal(isSamplesAnomaly({ source: "callback" }), false);
    assert.equal(isSamplesAnomaly(null), false);
  });
});
