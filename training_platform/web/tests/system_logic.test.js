// Unit tests of static/js/system_logic.js (`npm test`, docs/dashboard.md): the System
// tab's stores from the API's answer, its chart lines, live samples, stage timing.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Columns } from "../static/js/series.js";
import {
  SYSTEM_CHARTS, appendSample, chartData, chartLines, emptyStore, gpuIndices, pickHost, pointPlace, pointValue,
  storeFromAnswer, throttlesAt, timeExtent, timingStack,
} from "../static/js/system_logic.js";

const spec = (id) => SYSTEM_CHARTS.find((chart) => chart.id === id);

function exactAnswer() {
  return {
    downsampled: false, source: "samples", count: 3,
    timestamps: [100, 110, 120], steps: [null, 4, 5],
    series: {
      "cpu.percent": { values: [150, 200, null] },
      "cpu.count": { values: [8, 8, 8] },
      "memory.used_gib": { values: [10, 11, 12] },
      "memory.total_gib": { values: [64, 64, 64] },
      "gpus.0.utilization": { values: [90, 0, 95] },
      "gpus.1.utilization": { values: [80, 1, 85] },
      "gpus.10.utilization": { values: [null, null, null] },
      "gpus.0.memory_used_gib": { values: [100, 101, 102] },
      "gpus.1.memory_used_gib": { values: [90, 91, 92] },
      "gpus.0.memory_total_gib": { values: [139.8, 139.8, 139.8] },
      "gpus.1.memory_total_gib": { values: [139.8, 139.8, 139.8] },
      "gpus.0.power_limit_w": { values: [700, 700, 700] },
      "gpus.1.power_limit_w": { values: [700, 700, 600] },
      "gpus.0.power_w": { values: [600, 100, 610] },
      "gpus.1.power_w": { values: [500, 90, 510] },
      "gpus.1.throttle_thermal": { values: [0, 1, 0] },
      "gpus.0.throttle_power": { values: [0, 1, 0] },
    },
  };
}

describe("storeFromAnswer", () => {
  test("exact values: min and max are the values", () => {
    const store = storeFromAnswer(exactAnswer());
    assert.equal(store.downsampled, false);
    assert.deepEqual(store.times, [100, 110, 120]);
    assert.deepEqual(store.steps, [null, 4, 5]);
    assert.deepEqual(store.cols.get("cpu.percent"), { min: [150, 200, null], max: [150, 200, null] });
  });

  test("buckets keep their min and max", () => {
    const store = storeFromAnswer({
      downsampled: true, timestamps: [0, 60], steps: [1, 2],
      series: { "cpu.percent": { min: [1, 2], max: [3, 4] } },
    });
    assert.equal(store.downsampled, true);
    assert.deepEqual(store.cols.get("cpu.percent"), { min: [1, 2], max: [3, 4] });
  });

  test("a host missing from the answer is an empty store", () => {
    assert.deepEqual(storeFromAnswer(undefined), emptyStore());
  });
});

describe("pickHost", () => {
  test("the one asked for when known, else the first, null with none", () => {
    assert.equal(pickHost(["a", "b"], "b"), "b");
    assert.equal(pickHost(["a", "b"], "gone"), "a");
    assert.equal(pickHost(["a", "b"], null), "a");
    assert.equal(pickHost([], "a"), null);
  });
});

describe("gpuIndices", () => {
  test("numeric order, each GPU once", () => {
    assert.deepEqual(gpuIndices(["gpus.10.x", "gpus.2.y", "gpus.2.z", "cpu.percent", "gpus.0.x"]), [0, 2, 10]);
  });
});

describe("chartLines", () => {
  const store = storeFromAnswer(exactAnswer());

  test("one coloured line per GPU with values; a GPU with none is left out", () => {
    const lines = chartLines(spec("sys-gpu-util"), store);
    assert.deepEqual(lines.map((line) => line.label), ["GPU 0", "GPU 1"]);
    assert.notEqual(lines[0].color, lines[1].color);
    assert.ok(lines.every((line) => !line.ref));
  });

  test("a total shared by every GPU is one dashed reference", () => {
    const lines = chartLines(spec("sys-gpu-memory"), store);
    assert.deepEqual(lines.map((line) => [line.label, line.ref]),
      [["GPU 0", false], ["GPU 1", false], ["total", true]]);
  });

  test("different limits: a reference per GPU", () => {
    const lines = chartLines(spec("sys-gpu-power"), store);
    assert.deepEqual(lines.filter((line) => line.ref).map((line) => line.label), ["GPU 0 limit", "GPU 1 limit"]);
  });

  test("named lines with their references (scaled: 100 per core)", () => {
    const lines = chartLines(spec("sys-cpu"), store);
    assert.deepEqual(lines.map((line) => [line.key, line.scale, line.ref]),
      [["cpu.percent", 1, false], ["cpu.count", 100, true]]);
    assert.deepEqual(chartData(store, lines), [[100, 110, 120], [150, 200, null], [800, 800, 800]]);
  });

  test("nothing to draw: no lines, and no lone reference", () => {
    assert.deepEqual(chartLines(spec("sys-network"), store), []);
    assert.deepEqual(chartLines(spec("sys-gpu-temp"), store), []);
    const onlyTotal = storeFromAnswer({ timestamps: [1], steps: [1], series: { "memory.total_gib": { values: [64] } } });
    assert.deepEqual(chartLines(spec("sys-memory"), onlyTotal), []);
  });
});

describe("chartData", () => {
  test("downsampled: min then max per line, a reference once (its max)", () => {
    const store = storeFromAnswer({
      downsampled: true, timestamps: [0, 60], steps: [1, 2],
      series: { "memory.used_gib": { min: [1, 2], max: [3, 4] }, "memory.total_gib": { min: [64, 64], max: [64, 64] } },
    });
    const lines = chartLines(spec("sys-memory"), store);
    assert.deepEqual(chartData(store, lines), [[0, 60], [1, 2], [3, 4], [64, 64]]);
  });
});

describe("appendSample", () => {
  test("appends newer samples, pads new series, skips what is held", () => {
    const store = storeFromAnswer(exactAnswer());
    assert.equal(appendSample(store, { timestamp: 120, step: 5, values: { "cpu.percent": 1 } }), false);
    assert.equal(appendSample(store, { timestamp: 130, step: 6, values: { "cpu.percent": 300, "disk.used_percent": 40 } }), true);
    assert.deepEqual(store.times, [100, 110, 120, 130]);
    assert.deepEqual(store.steps, [null, 4, 5, 6]);
    assert.deepEqual(store.cols.get("cpu.percent").max, [150, 200, null, 300]);
    assert.deepEqual(store.cols.get("disk.used_percent").min, [null, null, null, 40]);
    assert.deepEqual(store.cols.get("memory.used_gib").max, [10, 11, 12, null]); // absent: a gap
  });

  test("bounded: the oldest points go first", () => {
    const store = emptyStore();
    for (let t = 1; t <= 5; t += 1) appendSample(store, { timestamp: t, step: null, values: { "cpu.percent": t } }, 3);
    assert.deepEqual(store.times, [3, 4, 5]);
    assert.deepEqual(store.cols.get("cpu.percent").max, [3, 4, 5]);
    assert.deepEqual(store.steps, [null, null, null]);
  });

  test("a sample without a time is not drawn", () => {
    assert.equal(appendSample(emptyStore(), { step: 1, values: {} }), false);
  });
});

describe("legend", () => {
  const store = storeFromAnswer(exactAnswer());

  test("the point's time and step", () => {
    assert.match(pointPlace(store, 1), /^\d\d:\d\d:\d\d · step 4$/);
    assert.match(pointPlace(store, 0), /· no step yet$/);
  });

  test("values, a bucket's range, a scaled reference", () => {
    const [cpu, cores] = chartLines(spec("sys-cpu"), store);
    assert.equal(pointValue(store, cpu, 1), "200");
    assert.equal(pointValue(store, cores, 1), "800");
    const buckets = storeFromAnswer({
      downsampled: true, timestamps: [0], steps: [1], series: { "cpu.percent": { min: [10], max: [95.5] } },
    });
    assert.equal(pointValue(buckets, chartLines(spec("sys-cpu"), buckets)[0], 0), "10 … 95.5");
  });

  test("throttling GPUs at a point", () => {
    assert.deepEqual(throttlesAt(store, 1), ["GPU 0 power", "GPU 1 thermal"]);
    assert.deepEqual(throttlesAt(store, 0), []);
  });
});

describe("timingStack", () => {
  function run() {
    const columns = new Columns();
    const record = (step, timestamp, gen, update) => ({
      step, timestamp, timing: { gen, update_actor: update, "update_actor/optimizer": 0.1 },
    });
    columns.appendRecord(record(0, 1000, 2, 1));
    columns.appendRecord(record(1, 1010, 3, 0.5));
    return columns;
  }

  test("top-level stages stacked on the wall-clock axis", () => {
    const { store, lines } = timingStack(run());
    assert.deepEqual(store.times, [1000, 1010]);
    assert.deepEqual(store.steps, [0, 1]);
    assert.deepEqual(lines.map((line) => line.label), ["gen", "update_actor"]);
    assert.deepEqual(lines[0].top, [2, 3]);
    assert.deepEqual(lines[1].top, [3, 3.5]);
    assert.deepEqual(store.cols.get("timing.update_actor").max, [1, 0.5]); // the legend's own value
  });

  test("no stages or no times: nothing", () => {
    assert.equal(timingStack(null), null);
    const columns = new Columns();
    columns.appendRecord({ step: 0, timing: { gen: 1 } });
    assert.equal(timingStack(columns), null);
  });
});

describe("timeExtent", () => {
  test("the union of the stores' times; a single time gets a second of width", () => {
    const a = storeFromAnswer(exactAnswer());
    const b = { times: [90, 115] };
    assert.deepEqual(timeExtent(a, b, null), [90, 120]);
    assert.deepEqual(timeExtent({ times: [5] }), [5, 6]);
    assert.equal(timeExtent(emptyStore(), null), null);
  });
});
