// Unit tests of static/js/profile_logic.js (`npm test`): the profiling views' pure parts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  memoryKeys, opTable, parseCsv, slowestSteps, stageTableFromColumns, tabOfHash, viewOps, withReferenceLines,
} from "../static/js/profile_logic.js";
import { Columns } from "../static/js/series.js";

function run(records) {
  const columns = new Columns();
  for (const record of records) columns.appendRecord(record);
  return columns;
}

const RECORDS = [0, 1, 2, 3].map((step) => ({
  step,
  timestamp: 100 + step,
  performance: { step_time: step === 2 ? 4.0 : 1.0 },
  timing: { rollout: step === 2 ? 3.0 : 0.5, update: 0.4, "update/optimizer": 0.1 },
  extra: { "profiling/rss_gib": 1 + step * 0.1 },
}));

describe("tabOfHash", () => {
  test("reads the fourth segment, known tabs only", () => {
    assert.equal(tabOfHash("#/run/job1/timing"), "timing");
    assert.equal(tabOfHash("#/run/job1"), "");
    assert.equal(tabOfHash("#/run/job1/bogus"), "");
  });
});

describe("stageTableFromColumns", () => {
  test("mean, percentiles and share of the step, parents before children", () => {
    const rows = stageTableFromColumns(run(RECORDS));
    assert.deepEqual(rows.map((r) => r.stage), ["rollout", "update", "update/optimizer"]);
    const rollout = rows[0];
    assert.equal(rollout.total, 4.5);
    assert.equal(rollout.mean, 4.5 / 4);
    assert.equal(rollout.p50, 0.5);
    assert.ok(Math.abs(rollout.p95 - 2.625) < 1e-12);
    assert.equal(rollout.share, 4.5 / 7);
    assert.equal(rows[2].depth, 1);
  });

  test("without step times, the top-level stages' sum is the whole", () => {
    const rows = stageTableFromColumns(run([{ step: 0, timing: { a: 1, b: 3 } }]));
    assert.deepEqual(rows.map((r) => [r.stage, r.share]), [["b", 0.75], ["a", 0.25]]);
  });
});

describe("slowestSteps", () => {
  test("slowest first, with its top-level stages", () => {
    const slow = slowestSteps(run(RECORDS), 2);
    assert.deepEqual(slow[0], { step: 2, lastStep: 2, seconds: 4, stages: { rollout: 3, update: 0.4 } });
    assert.equal(slow[1].step, 0);
    assert.deepEqual(slowestSteps(run([{ step: 0, loss: { x: 1 } }])), []);
  });
});

describe("memory", () => {
  test("memoryKeys sorts GPU figures and finds RSS", () => {
    const keys = memoryKeys(["extra.profiling/cuda1/peak_gib", "extra.profiling/cuda0/allocated_gib",
      "extra.profiling/rss_gib", "extra.profiling/cuda0/growth_mib_per_step"]);
    assert.deepEqual(keys, { gpu: ["extra.profiling/cuda0/allocated_gib", "extra.profiling/cuda1/peak_gib"], host: ["extra.profiling/rss_gib"] });
  });

  test("withReferenceLines adds a flat baseline and the trend over its steps only", () => {
    const columns = run(RECORDS);
    const out = withReferenceLines(columns, {
      baseline: { rss_gib: 0.9, "cuda:0": { allocated_gib: 5 } },
      trend: { rss_gib: { from_step: 1, to_step: 3, from_gib: 1.1, to_gib: 1.3 } },
    });
    assert.deepEqual(out.cols.get("ref.rss_baseline").mean, [0.9, 0.9, 0.9, 0.9]);
    assert.deepEqual(out.cols.get("ref.cuda0_baseline").mean, [5, 5, 5, 5]);
    const trend = out.cols.get("ref.rss_trend").mean;
    assert.equal(trend[0], null);
    assert.ok(Math.abs(trend[2] - 1.2) < 1e-12);
    assert.equal(out.length, 4);
    assert.equal(columns.cols.has("ref.rss_trend"), false); // the input is left alone
  });
});

describe("op table", () => {
  test("parseCsv handles quotes, doubled quotes, CRLF and a BOM", () => {
    assert.deepEqual(parseCsv('\ufeffa,b\r\n"x, y","say ""hi"""\n'), [["a", "b"], ["x, y", 'say "hi"']]);
  });

  test("numbers are parsed, names are kept as text", () => {
    const table = opTable("op_name,self_time_ms,calls\naten::mm,1.5,3\n\"aten::add, fused\",2,1\n");
    assert.deepEqual(table.columns, ["op_name", "self_time_ms", "calls"]);
    assert.deepEqual(table.rows[1], { op_name: "aten::add, fused", self_time_ms: 2, calls: 1 });
  });

  test("viewOps filters by name and sorts either way", () => {
    const rows = [{ op_name: "aten::mm", t: 1 }, { op_name: "aten::add", t: 3 }, { op_name: "cudaMemcpy", t: 2 }];
    assert.deepEqual(viewOps(rows, { column: "t" }).map((r) => r.t), [3, 2, 1]);
    assert.deepEqual(viewOps(rows, { column: "t", descending: false, filter: "ATEN" }).map((r) => r.op_name), ["aten::mm", "aten::add"]);
    assert.deepEqual(viewOps(rows, { column: "op_name", descending: false }).map((r) => r.t), [3, 1, 2]);
  });
});
