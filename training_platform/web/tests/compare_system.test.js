// Unit tests of static/js/compare_system.js (`npm test`): the Compare view's System
// group, its query, and each run's System points as a column store the chart merges.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { chosenFields, mergeRuns } from "../static/js/compare_logic.js";
import { groupMetrics } from "../static/js/metric_groups.js";
import {
  isSystemKey, systemApiQuery, systemRuns, systemUnion,
} from "../static/js/compare_system.js";

const RUNS = [
  { jobId: "a", label: "run a", color: "#2563eb", status: "running", timeOrigin: 100 },
  { jobId: "b", label: "b", color: "#dc2626", status: "completed", timeOrigin: null },
  { jobId: "c", label: "c", color: "#16a34a", status: "completed", timeOrigin: null },
];

const BODY = {
  x: "time",
  jobs: [
    { job_id: "a", series: {}, steps: [], system_series: ["system.gpu_utilization"],
      system: { x_values: [0, 10], steps: [1, 2], timestamps: [100, 110], downsampled: false,
        series: { "system.gpu_utilization": { values: [50, 60] } } } },
    { job_id: "b", series: {}, steps: [], system_series: ["system.cpu_percent", "system.gpu_utilization"],
      system: { x_values: [5, 15], steps: [null, 3], timestamps: [5, 15], downsampled: true,
        series: { "system.gpu_utilization": { min: [10, 20], max: [90, 30] } } } },
    { job_id: "c", series: {}, steps: [], system_series: [] },
  ],
};

describe("System series in Compare", () => {
  test("a System key is one under system.", () => {
    assert.equal(isSystemKey("system.gpu_utilization"), true);
    assert.equal(isSystemKey("systemic.x"), false);
    assert.equal(isSystemKey("loss.actor_loss"), false);
    assert.equal(isSystemKey(undefined), false);
  });

  test("the union of the runs' System series, none for a run without samples", () => {
    assert.deepEqual(systemUnion(BODY.jobs), ["system.cpu_percent", "system.gpu_utilization"]);
    assert.deepEqual(systemUnion([{ job_id: "c" }]), []);
  });

  test("the query asks for every System series on the view's x axis", () => {
    const state = { jobs: ["a", "b"], x: "time", smoothing: 0.6, window: null, fields: null };
    assert.equal(systemApiQuery(state, 500), "jobs=a,b&max_points=500&x=time&fields=system");
    assert.equal(systemApiQuery({ ...state, x: "step" }, 500), "jobs=a,b&max_points=500&fields=system");
  });

  test("each run's System points are a column store with its label and colour", () => {
    const [a, b, c] = systemRuns(RUNS, BODY);
    assert.equal(a.jobId, "a");
    assert.equal(a.label, "run a");
    assert.equal(a.color, "#2563eb");
    assert.deepEqual(a.x, [0, 10]);
    assert.deepEqual(a.series.get("system.gpu_utilization").line, [50, 60]);
    assert.deepEqual(b.series.get("system.gpu_utilization").max, [90, 30]);
    assert.equal(b.downsampled, true);
    assert.equal(c.series.size, 0);
    assert.deepEqual(c.x, []);
  });

  test("merged for a chart: a line per run that has the series, on each run's own x", () => {
    const merged = mergeRuns(systemRuns(RUNS, BODY), "system.gpu_utilization");
    assert.deepEqual(merged.xs, [0, 5, 10, 15]);
    assert.deepEqual(merged.perRun[0].line, [50, null, 60, null]);
    assert.deepEqual(merged.perRun[1].max, [null, 90, null, 30]);
    assert.deepEqual(merged.perRun[2].present, []);
  });

  test("System series are offered in their own group, never a default chart", () => {
    const union = ["loss.actor_loss", "system.gpu_utilization", "zeta.x"];
    assert.deepEqual(chosenFields(null, union), ["loss.actor_loss", "zeta.x"]);
    const groups = groupMetrics(union);
    const system = groups.find((group) => group.group === "system");
    assert.equal(system.title, "System");
    assert.deepEqual(system.items, [{ key: "system.gpu_utilization", title: "GPU utilization (%, mean of all GPUs)" }]);
  });
});
