// Unit tests of static/js/compare_logic.js and url_state.js (`npm test`,
// docs/dashboard.md): the Compare view's URL state, colours per run, runs merged on
// one x axis, the hover value, live points with the smoothing continued, config diff.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  MAX_RUNS,
  RUN_PALETTE,
  appendLive,
  chosenFields,
  clampSmoothing,
  compareApiQuery,
  compareHash,
  configCell,
  configDiffRows,
  fmtCount,
  fmtDuration,
  hashString,
  lastPoint,
  lastStepOf,
  liveX,
  mergeRuns,
  metricUnion,
  nearestPoint,
  parseCompareState,
  runColor,
  runColors,
  runFromCompare,
  runLabel,
  seedSmoothing,
  smoothNext,
  timeOrigin,
} from "../static/js/compare_logic.js";
import { buildQuery, hashQuery, parseList, parseParams } from "../static/js/url_state.js";
import { smooth } from "../static/js/series.js";

/** An exact compare entry (one point per step) with `values` per series. */
function exactEntry(jobId, steps, series, extra = {}) {
  return {
    job_id: jobId, name: null, project: null, status: "completed", health: "ok",
    downsampled: false, bucket_steps: 1, steps, timestamps: steps.map((s) => 1000 + s),
    x_values: steps.slice(), smoothing_exact: true,
    series: Object.fromEntries(Object.entries(series).map(([key, values]) => [key, { values }])),
    ...extra,
  };
}

describe("url_state", () => {
  test("hashQuery is what follows the first question mark", () => {
    assert.equal(hashQuery("#/compare?jobs=a,b&x=step"), "jobs=a,b&x=step");
    assert.equal(hashQuery("#/"), "");
    assert.equal(hashQuery("#/?q=a?b"), "q=a?b");
  });

  test("lists keep items with commas and slashes, drop empties and repeats", () => {
    const query = buildQuery([["fields", ["extra.actor/entropy", "a,b", "", "reward.mean"]]]);
    assert.equal(query, "fields=extra.actor%2Fentropy,a%2Cb,reward.mean");
    assert.deepEqual(parseList(query, "fields"), ["extra.actor/entropy", "a,b", "reward.mean"]);
    assert.deepEqual(parseList("jobs=a,,b,a", "jobs"), ["a", "b"]);
    assert.deepEqual(parseList("x=1", "jobs"), []);
  });

  test("the first of a repeated name wins; a stray percent sign is kept", () => {
    const params = parseParams("x=time&x=step&q=100%&flag");
    assert.equal(params.get("x"), "time");
    assert.equal(params.get("q"), "100%");
    assert.equal(params.get("flag"), "");
  });

  test("buildQuery leaves out empty values", () => {
    assert.equal(buildQuery([["a", ""], ["b", null], ["c", []], ["d", "x y"]]), "d=x%20y");
  });
});

describe("compare state in the URL", () => {
  test("round trip: jobs, x axis, smoothing and fields", () => {
    const state = { jobs: ["run-a", "run.b"], x: "tokens", smoothing: 0.6, window: null,
      fields: ["reward.mean", "extra.actor/entropy"] };
    const hash = compareHash(state);
    assert.equal(hash, "#/compare?jobs=run-a,run.b&x=tokens&smoothing=0.6&fields=reward.mean,extra.actor%2Fentropy");
    assert.deepEqual(parseCompareState(hashQuery(hash)), state);
  });

  test("defaults: step axis, no smoothing, fields not chosen", () => {
    assert.deepEqual(parseCompareState("jobs=a"),
      { jobs: ["a"], x: "step", smoothing: 0, window: null, fields: null });
    assert.equal(compareHash(parseCompareState("jobs=a")), "#/compare?jobs=a&x=step&smoothing=0");
  });

  test("bad values fall back: unknown axis, smoothing out of range or not a number", () => {
    assert.equal(parseCompareState("x=epoch").x, "step");
    assert.equal(parseCompareState("smoothing=5").smoothing, 0.99);
    assert.equal(parseCompareState("smoothing=-1").smoothing, 0);
    assert.equal(parseCompareState("smoothing=abc").smoothing, 0);
    assert.equal(clampSmoothing(0.123), 0.12);
  });

  test("a window mean replaces the EMA, capped", () => {
    const state = parseCompareState("jobs=a&smoothing=0.5&window=25");
    assert.equal(state.window, 25);
    assert.equal(state.smoothing, 0);
    assert.equal(compareHash(state), "#/compare?jobs=a&x=step&window=25");
    assert.equal(parseCompareState("window=0").window, null);
    assert.equal(parseCompareState("window=9999999").window, 100000);
  });

  test("an empty field list is kept (every chart removed), distinct from none chosen", () => {
    const state = parseCompareState("jobs=a&fields=");
    assert.deepEqual(state.fields, []);
    assert.match(compareHash(state), /fields=$/);
  });

  test("the API query: step and no smoothing are left to the defaults", () => {
    const state = parseCompareState("jobs=a,b");
    assert.equal(compareApiQuery(state, 800), "jobs=a,b&max_points=800");
    const smoothed = parseCompareState("jobs=a,b&x=time&smoothing=0.9");
    assert.equal(compareApiQuery(smoothed, 800), "jobs=a,b&max_points=800&x=time&smoothing=0.9");
    assert.equal(compareApiQuery(parseCompareState("jobs=a&window=10")), "jobs=a&window=10");
  });
});

/** Two job ids whose own colours are the same. */
function collidingPair() {
  const seen = new Map();
  for (let i = 0; ; i += 1) {
    const id = `run-${i}`;
    const color = runColor(id);
    if (seen.has(color)) return [seen.get(color), id].sort();
    seen.set(color, id);
  }
}

describe("run colours and labels", () => {
  test("a colour is derived from the job id alone: stable, and #rrggbb", () => {
    assert.equal(runColor("grpo-qwen-lr3e-6"), runColor("grpo-qwen-lr3e-6"));
    assert.match(runColor("a"), /^#[0-9a-f]{6}$/);
    assert.equal(new Set(RUN_PALETTE).size, RUN_PALETTE.length);
    assert.equal(hashString("a"), 0xe40c292c); // FNV-1a's published value
  });

  test("in one comparison no two runs share a colour, whatever the order", () => {
    const ids = Array.from({ length: 20 }, (_, i) => `run-${i}`);
    const colors = runColors(ids);
    assert.equal(new Set(colors.values()).size, 20);
    assert.deepEqual([...runColors([...ids].reverse())].sort(), [...colors].sort());
    assert.ok(RUN_PALETTE.includes(colors.get("run-3")));
  });

  test("a run keeps its own colour unless another run of the comparison has it", () => {
    const [first, second] = collidingPair();
    assert.equal(runColor(first), runColor(second));
    const colors = runColors([second, first, "other"]);
    assert.equal(colors.get(first), runColor(first)); // the id that sorts first keeps it
    assert.notEqual(colors.get(second), colors.get(first));
    assert.equal(runColors([second]).get(second), runColor(second));
  });

  test("a run is named by its name, else its job id", () => {
    assert.equal(runLabel({ job_id: "a", name: "lr 3e-6" }), "lr 3e-6");
    assert.equal(runLabel({ job_id: "a", name: null }), "a");
    assert.equal(runLabel({ job_id: "a", name: "  " }), "a");
    assert.equal(runLabel({ jobId: "b" }), "b");
  });
});

describe("runs from the compare answer", () => {
  test("exact values: non-finite strings are gaps; the line is the mean without smoothing", () => {
    const run = runFromCompare(exactEntry("a", [0, 1, 2], { "loss.actor_loss": [1, "NaN", 3] }));
    const series = run.series.get("loss.actor_loss");
    assert.deepEqual(series.mean, [1, null, 3]);
    assert.deepEqual(series.line, [1, null, 3]);
    assert.deepEqual(run.x, [0, 1, 2]);
    assert.equal(lastStepOf(run), 2);
  });

  test("buckets keep min/max; the line is the server's smoothed values", () => {
    const run = runFromCompare({
      job_id: "b", downsampled: true, steps: [0, 10], last_steps: [9, 19], timestamps: [5, null],
      x_values: [0, 10], smoothing_exact: false,
      series: { "reward.mean": { mean: [1, 2], min: [0, 1], max: [2, 4], nonfinite: [0, 1], smoothed: [1, 1.5] } },
    });
    const series = run.series.get("reward.mean");
    assert.deepEqual([series.min, series.max, series.line], [[0, 1], [2, 4], [1, 1.5]]);
    assert.equal(run.smoothingExact, false);
    assert.deepEqual(run.times, [5, null]);
    assert.equal(lastStepOf(run), 19);
  });

  test("a run without x values (no tokens reported) has nulls", () => {
    const entry = exactEntry("c", [0, 1], { "kl.mean": [1, 2] });
    entry.x_values = [null, null];
    assert.deepEqual(runFromCompare(entry).x, [null, null]);
  });

  test("the metric union and the default charts", () => {
    const a = runFromCompare(exactEntry("a", [0], { "reward.mean": [1], "extra.foo": [1] }));
    const b = runFromCompare(exactEntry("b", [0], { "loss.actor_loss": [1], "timing.rollout": [1] }));
    const union = metricUnion([a, b]);
    assert.deepEqual(union, ["extra.foo", "loss.actor_loss", "reward.mean", "timing.rollout"]);
    assert.deepEqual(chosenFields(null, union), ["reward.mean", "loss.actor_loss", "extra.foo"]);
    assert.deepEqual(chosenFields(["timing.rollout"], union), ["timing.rollout"]);
    assert.deepEqual(chosenFields([], union), []);
  });
});

describe("mergeRuns", () => {
  const a = runFromCompare(exactEntry("a", [0, 2, 4], { m: [1, 2, 3] }));
  const b = runFromCompare(exactEntry("b", [1, 2, 3], { m: [10, null, 30] }));
  const c = runFromCompare(exactEntry("c", [0, 1], { other: [5, 6] }));

  test("the x axis is the union of the x values where a run has a value", () => {
    const merged = mergeRuns([a, b, c], "m");
    assert.deepEqual(merged.xs, [0, 1, 2, 3, 4]);
    assert.deepEqual(merged.perRun[0].line, [1, null, 2, null, 3]);
    assert.deepEqual(merged.perRun[1].line, [null, 10, null, 30, null]);
    assert.deepEqual(merged.perRun[1].present, [1, 3]);
  });

  test("a run with disjoint metrics has no line at all", () => {
    const merged = mergeRuns([a, b, c], "m");
    assert.deepEqual(merged.perRun[2].line, [null, null, null, null, null]);
    assert.deepEqual(merged.perRun[2].present, []);
    assert.equal(lastPoint(merged, 2), null);
    assert.equal(nearestPoint(merged, 2, 1), null);
  });

  test("points with an unknown x are left out; equal x: the later point wins", () => {
    const entry = exactEntry("t", [0, 1, 2, 3], { m: [1, 2, 3, 4] });
    entry.x_values = [null, 100, 100, 250];
    const merged = mergeRuns([runFromCompare(entry)], "m");
    assert.deepEqual(merged.xs, [100, 250]);
    assert.deepEqual(merged.perRun[0].line, [3, 4]);
  });

  test("min and max come along (the band behind the smoothed line)", () => {
    const run = runFromCompare({
      job_id: "d", downsampled: true, steps: [0, 10], last_steps: [9, 19], x_values: [0, 10],
      series: { m: { mean: [1, 2], min: [0, 1], max: [3, 4], smoothed: [1, 1.4] } },
    });
    const merged = mergeRuns([run], "m");
    assert.deepEqual(merged.perRun[0], { line: [1, 1.4], min: [0, 1], max: [3, 4], present: [0, 1] });
  });

  test("the hover value is each run's nearest point, only inside its own range", () => {
    const merged = mergeRuns([a, b], "m");
    assert.equal(nearestPoint(merged, 0, 2), 2); // exact
    assert.equal(nearestPoint(merged, 1, 2), 1); // b has no value at 2: nearest, the earlier on a tie
    assert.equal(nearestPoint(merged, 1, 2.6), 3);
    assert.equal(nearestPoint(merged, 1, 4), null); // b ended at 3
    assert.equal(nearestPoint(merged, 1, 0), null); // and began at 1
    assert.equal(nearestPoint(merged, 0, null), null);
    assert.equal(lastPoint(merged, 0), 4);
  });
});

describe("smoothing continued over live points", () => {
  test("the EMA continued from the server's last value equals smoothing the whole series", () => {
    const values = [1, 4, 2, 8, 5, 7, 3, 9];
    const weight = 0.6;
    const whole = smooth(values, weight);
    const head = values.slice(0, 5);
    const state = seedSmoothing({ mean: head, line: smooth(head, weight) }, { weight, exactCount: true });
    const tail = values.slice(5).map((value) => smoothNext(state, value, { weight }));
    tail.forEach((value, i) => assert.ok(Math.abs(value - whole[5 + i]) < 1e-12));
  });

  test("missing and non-finite values leave the average as it was", () => {
    const state = { last: 2, count: 3 };
    assert.equal(smoothNext(state, null, { weight: 0.5 }), null);
    assert.equal(smoothNext(state, Number.NaN, { weight: 0.5 }), null);
    assert.deepEqual(state, { last: 2, count: 3 });
  });

  test("with an unknown count the debiasing is taken as worn off", () => {
    const state = seedSmoothing({ mean: [1, 2], line: [1.5, 1.8] }, { weight: 0.5, exactCount: false });
    assert.deepEqual(state, { last: 1.8, count: Infinity });
    assert.equal(smoothNext(state, 3.8, { weight: 0.5 }), 2.8);
  });

  test("a series that starts live starts at its first value", () => {
    const state = seedSmoothing({ mean: [null], line: [null] }, { weight: 0.9, exactCount: true });
    assert.ok(Math.abs(smoothNext(state, 4, { weight: 0.9 }) - 4) < 1e-12);
  });

  test("the window mean keeps the last n values", () => {
    const state = seedSmoothing({ mean: [1, null, 2, 3], line: [] }, { window: 2 });
    assert.deepEqual(state.values, [2, 3]);
    assert.equal(smoothNext(state, 5, { window: 2 }), 4);
    assert.equal(smoothNext(state, "NaN", { window: 2 }), null);
  });
});

describe("live records appended to a run", () => {
  test("exact run, smoothed: new series padded, the EMA continued, gaps for NaN", () => {
    const weight = 0.5;
    const entry = exactEntry("a", [0, 1], { m: [2, 4] });
    entry.series.m.smoothed = smooth([2, 4], weight);
    const run = runFromCompare(entry);
    appendLive(run, { step: 2, timestamp: 1002 }, { m: 6, n: 1 }, { mode: "step", weight });
    appendLive(run, { step: 3, timestamp: 1003 }, { m: "NaN" }, { mode: "step", weight });
    const m = run.series.get("m");
    assert.deepEqual(m.mean, [2, 4, 6, null]);
    assert.deepEqual(m.line.slice(0, 3), smooth([2, 4, 6], weight));
    assert.equal(m.line[3], null);
    assert.deepEqual(run.series.get("n").mean, [null, null, 1, null]);
    assert.deepEqual(run.steps, [0, 1, 2, 3]);
    assert.equal(lastStepOf(run), 3);
  });

  test("bucketed run: min, max, mean and line all grow", () => {
    const run = runFromCompare({
      job_id: "b", downsampled: true, steps: [0], last_steps: [9], x_values: [0],
      series: { m: { mean: [1], min: [0], max: [2] } },
    });
    appendLive(run, { step: 10 }, { m: 5 }, { mode: "step", weight: 0 });
    const m = run.series.get("m");
    assert.deepEqual([m.mean, m.min, m.max, m.line], [[1, 5], [0, 5], [2, 5], [1, 5]]);
    assert.deepEqual(run.lastSteps, [9, 10]);
  });

  test("x of a live record: time since the first record, tokens cumulative or summed", () => {
    const run = runFromCompare(exactEntry("a", [0, 1], { m: [1, 2] }));
    run.x = [0, 1];
    assert.equal(timeOrigin(run), 1000);
    run.timeOrigin = timeOrigin(run);
    assert.equal(liveX("time", { step: 2, timestamp: 1010 }, {}, run), 10);
    assert.equal(liveX("time", { step: 2 }, {}, run), null);
    assert.equal(liveX("step", { step: 7 }, {}, run), 7);
    assert.equal(liveX("tokens", { step: 2 }, { "extra.num_tokens": 5000 }, run), 5000);
    run.x = [100, null];
    assert.equal(liveX("tokens", { step: 2 }, { "extra.perf/total_num_tokens": 50 }, run), 150);
    assert.equal(liveX("tokens", { step: 2 }, {}, run), null);
    const fresh = { x: [], times: [], timeOrigin: null };
    assert.equal(liveX("time", { step: 0, timestamp: 50 }, {}, fresh), 0);
  });
});

describe("config diff", () => {
  test("one row per differing key, a cell per run, missing keys marked", () => {
    const body = { jobs: ["a", "b"], same: 12, differences: {
      "rollout.n": { a: 8, b: null }, "actor.lr": { a: 3e-6, b: 1e-6 },
      "model.layers": { a: [1, 2], b: { x: 1 } },
    } };
    const rows = configDiffRows(body, ["a", "b"]);
    assert.deepEqual(rows.map((row) => row.key), ["actor.lr", "model.layers", "rollout.n"]);
    assert.deepEqual(rows[0].cells.map((cell) => cell.text), ["0.000003", "0.000001"]);
    assert.deepEqual(rows[1].cells.map((cell) => cell.text), ["[1,2]", '{"x":1}']);
    assert.deepEqual(rows[2].cells[1], { jobId: "b", text: "—", missing: true });
  });

  test("cells: strings as they are, booleans, a run without the key", () => {
    assert.deepEqual(configCell("NaN"), { text: "NaN", missing: false });
    assert.deepEqual(configCell(false), { text: "false", missing: false });
    assert.deepEqual(configCell(undefined), { text: "—", missing: true });
    assert.deepEqual(configDiffRows({ differences: {} }, ["a"]), []);
  });
});

describe("axis labels", () => {
  test("durations", () => {
    assert.equal(fmtDuration(45), "45 s");
    assert.equal(fmtDuration(2.5), "2.5 s");
    assert.equal(fmtDuration(0), "0 s");
    assert.equal(fmtDuration(0.0123), "12 ms");
    assert.equal(fmtDuration(750), "12m 30s");
    assert.equal(fmtDuration(3 * 3600 + 300), "3h 05m");
    assert.equal(fmtDuration(2 * 86400 + 4 * 3600), "2d 4h");
    assert.equal(fmtDuration(null), "–");
  });

  test("counts", () => {
    assert.equal(fmtCount(950), "950");
    assert.equal(fmtCount(12500), "12.5k");
    assert.equal(fmtCount(3.2e6), "3.2M");
    assert.equal(fmtCount(1.05e9), "1.05B");
    assert.equal(fmtCount(undefined), "–");
  });

  test("the limit is the API's", () => {
    assert.equal(MAX_RUNS, 20);
  });
});
