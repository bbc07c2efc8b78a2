// Unit tests of static/js/series.js, the column store (`npm test`, docs/dashboard.md).
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Columns, flattenRecord, mapAlong, smooth, toCsv, wallClock } from "../static/js/series.js";

/** A record as the API and the live stream send it (docs/contract.md §2). */
function record(step, loss, extra = {}) {
  return { step, timestamp: 1000 + step, loss, ...extra };
}

/** A `?max_points=` answer holding buckets. */
function downsampledBody() {
  return {
    downsampled: true,
    bucket_steps: 10,
    steps: [0, 10, 20],
    last_steps: [9, 19, 29],
    timestamps: [100, 110, null],
    series: {
      "loss.a": { mean: [1.5, null, 3], min: [1, null, 2], max: [2, null, 4], nonfinite: [0, 10, 2] },
    },
  };
}

/** The store as plain arrays, for deepEqual. */
function dump(columns) {
  const cols = {};
  for (const key of columns.keys()) {
    const { mean, min, max, nf } = columns.cols.get(key);
    cols[key] = { mean, min, max, nf };
  }
  return { steps: columns.steps, lastSteps: columns.lastSteps, times: columns.times, cols };
}

describe("flattenRecord", () => {
  test("names every series group.field, from the known groups and `other`", () => {
    const flat = flattenRecord({
      step: 3,
      timestamp: 1.5,
      loss: { actor_loss: 0.5, critic_loss: -1 },
      reward: { mean: 2 },
      extra: { "actor/entropy": 0.1 },
      other: { custom: { x: 7 } },
    });
    assert.deepEqual(flat, {
      "loss.actor_loss": 0.5,
      "loss.critic_loss": -1,
      "reward.mean": 2,
      "extra.actor/entropy": 0.1,
      "custom.x": 7,
    });
  });

  test("keeps the non-finite strings, drops every other non-number", () => {
    const flat = flattenRecord({
      step: 0,
      loss: { a: "NaN", b: "Infinity", c: "-Infinity", d: "nan", e: null, f: true, g: { nested: 1 }, h: "1.5" },
    });
    assert.deepEqual(flat, { "loss.a": "NaN", "loss.b": "Infinity", "loss.c": "-Infinity" });
  });

  test("ignores missing or non-object groups", () => {
    assert.deepEqual(flattenRecord({ step: 0 }), {});
    assert.deepEqual(flattenRecord({ step: 0, loss: 5, kl: null, other: { g: "x" } }), {});
  });
});

describe("Columns: an empty store", () => {
  test("has no length, no steps, no keys", () => {
    const columns = new Columns();
    assert.equal(columns.length, 0);
    assert.equal(columns.firstStep, null);
    assert.equal(columns.lastStep, null);
    assert.deepEqual(columns.keys(), []);
  });

  test("column() creates a series padded to the current length, once", () => {
    const columns = new Columns();
    columns.appendRecord(record(0, { a: 1 }));
    columns.appendRecord(record(1, { a: 2 }));
    const column = columns.column("loss.b");
    assert.deepEqual(column, { mean: [null, null], min: [null, null], max: [null, null], nf: [0, 0] });
    assert.equal(columns.column("loss.b"), column);
    assert.deepEqual(columns.keys(), ["loss.a", "loss.b"]);
  });
});

describe("Columns.appendRecord", () => {
  test("appends exact points: min = max = mean, aligned steps and times", () => {
    const columns = new Columns();
    columns.appendRecord(record(0, { a: 1.5 }));
    columns.appendRecord(record(1, { a: -2 }));
    assert.deepEqual(dump(columns), {
      steps: [0, 1],
      lastSteps: [0, 1],
      times: [1000, 1001],
      cols: { "loss.a": { mean: [1.5, -2], min: [1.5, -2], max: [1.5, -2], nf: [0, 0] } },
    });
    assert.equal(columns.length, 2);
    assert.equal(columns.firstStep, 0);
    assert.equal(columns.lastStep, 1);
  });

  test("a non-finite value is a point with no value and its mark, never dropped", () => {
    const columns = new Columns();
    columns.appendRecord(record(0, { a: "NaN", b: "Infinity", c: "-Infinity" }));
    assert.equal(columns.length, 1);
    assert.deepEqual(columns.cols.get("loss.a"), { mean: [null], min: [null], max: [null], nf: ["NaN"] });
    assert.deepEqual(columns.cols.get("loss.b").nf, ["Infinity"]);
    assert.deepEqual(columns.cols.get("loss.c").nf, ["-Infinity"]);
  });

  test("a null value is an empty point without a mark", () => {
    const columns = new Columns();
    columns.appendRecord(record(0, { a: 1 }));
    columns.appendRecord(record(1, { a: null }));
    assert.deepEqual(columns.cols.get("loss.a"), { mean: [1, null], min: [1, null], max: [1, null], nf: [0, 0] });
  });

  test("a series that appears late is padded before, one that stops is padded after", () => {
    const columns = new Columns();
    columns.appendRecord(record(0, { a: 1 }));
    columns.appendRecord(record(1, { a: 2, b: 20 }));
    columns.appendRecord(record(2, { b: 30 }));
    assert.deepEqual(columns.cols.get("loss.a").mean, [1, 2, null]);
    assert.deepEqual(columns.cols.get("loss.b").mean, [null, 20, 30]);
    assert.deepEqual(columns.cols.get("loss.b").nf, [0, 0, 0]);
    for (const key of columns.keys()) assert.equal(columns.cols.get(key).min.length, 3);
  });

  test("a record with no series still adds a step", () => {
    const columns = new Columns();
    columns.appendRecord({ step: 4 });
    assert.deepEqual(columns.steps, [4]);
    assert.deepEqual(columns.times, [null]);
  });

  test("a missing or non-finite timestamp is an unknown time", () => {
    const columns = new Columns();
    columns.appendRecord({ step: 0, loss: { a: 1 } });
    columns.appendRecord({ step: 1, timestamp: "NaN", loss: { a: 1 } });
    columns.appendRecord({ step: 2, timestamp: Infinity, loss: { a: 1 } });
    columns.appendRecord({ step: 3, timestamp: "5", loss: { a: 1 } });
    columns.appendRecord({ step: 4, timestamp: 0, loss: { a: 1 } });
    assert.deepEqual(columns.times, [null, null, null, null, 0]);
  });

  test("keeps the order it is given: dropping a replayed step is the caller's job", () => {
    const columns = new Columns();
    for (const step of [0, 1, 2, 3]) columns.appendRecord(record(step, { a: step }));
    columns.appendRecord(record(2, { a: 22 }));
    assert.deepEqual(columns.steps, [0, 1, 2, 3, 2]);
    assert.equal(columns.lastStep, 2);
  });

  test("a step coming again: cut below it, then append (the playback view's way)", () => {
    let columns = new Columns();
    for (const step of [0, 1, 2, 3, 4]) columns.appendRecord(record(step, { a: step }));
    const again = record(2, { a: 22 });
    if (again.step <= columns.lastStep) columns = columns.slice(null, again.step - 1);
    columns.appendRecord(again);
    assert.deepEqual(columns.steps, [0, 1, 2]);
    assert.deepEqual(columns.cols.get("loss.a").mean, [0, 1, 22]);
    assert.deepEqual(columns.times, [1000, 1001, 1002]);
  });
});

describe("Columns.fromHistory", () => {
  test("exact history: one point per step, non-finite strings marked, nulls empty", () => {
    const body = {
      downsampled: false,
      steps: [0, 1, 2, 3],
      timestamps: [10, 11, null, 13],
      series: { "loss.a": { values: [0.5, "NaN", null, "-Infinity"] }, "kl.max": { values: [1, 2, 3, 4] } },
    };
    const columns = Columns.fromHistory(body);
    assert.deepEqual(dump(columns), {
      steps: [0, 1, 2, 3],
      lastSteps: [0, 1, 2, 3],
      times: [10, 11, null, 13],
      cols: {
        "loss.a": {
          mean: [0.5, null, null, null],
          min: [0.5, null, null, null],
          max: [0.5, null, null, null],
          nf: [0, "NaN", 0, "-Infinity"],
        },
        "kl.max": { mean: [1, 2, 3, 4], min: [1, 2, 3, 4], max: [1, 2, 3, 4], nf: [0, 0, 0, 0] },
      },
    });
  });

  test("copies the answer's step arrays", () => {
    const body = { downsampled: false, steps: [0, 1], timestamps: [1, 2], series: {} };
    const columns = Columns.fromHistory(body);
    body.steps.push(2);
    body.timestamps.push(3);
    assert.deepEqual(columns.steps, [0, 1]);
    assert.deepEqual(columns.lastSteps, [0, 1]);
    assert.deepEqual(columns.times, [1, 2]);
  });

  test("without timestamps every time is unknown", () => {
    const columns = Columns.fromHistory({ downsampled: false, steps: [5, 6], series: {} });
    assert.deepEqual(columns.times, [null, null]);
    assert.equal(wallClock(columns), null);
  });

  test("downsampled history: buckets with first and last steps, min/max/mean and non-finite counts", () => {
    const columns = Columns.fromHistory(downsampledBody());
    assert.deepEqual(dump(columns), {
      steps: [0, 10, 20],
      lastSteps: [9, 19, 29],
      times: [100, 110, null],
      cols: {
        "loss.a": { mean: [1.5, null, 3], min: [1, null, 2], max: [2, null, 4], nf: [0, 10, 2] },
      },
    });
    assert.equal(columns.firstStep, 0);
    assert.equal(columns.lastStep, 29);
  });

  test("an empty answer is an empty store", () => {
    const columns = Columns.fromHistory({ downsampled: false, steps: [], timestamps: [], series: {} });
    assert.equal(columns.length, 0);
    assert.equal(columns.lastStep, null);
  });
});

describe("Columns.concat", () => {
  test("a downsampled overview then the exact live tail: keys united, each side padded", () => {
    const overview = Columns.fromHistory(downsampledBody());
    const live = new Columns();
    live.appendRecord({ step: 30, timestamp: 130, loss: { b: 5 } });
    live.appendRecord({ step: 31, timestamp: 131, loss: { a: "Infinity", b: 6 } });
    const both = overview.concat(live);
    assert.deepEqual(dump(both), {
      steps: [0, 10, 20, 30, 31],
      lastSteps: [9, 19, 29, 30, 31],
      times: [100, 110, null, 130, 131],
      cols: {
        "loss.a": {
          mean: [1.5, null, 3, null, null],
          min: [1, null, 2, null, null],
          max: [2, null, 4, null, null],
          nf: [0, 10, 2, 0, "Infinity"],
        },
        "loss.b": {
          mean: [null, null, null, 5, 6],
          min: [null, null, null, 5, 6],
          max: [null, null, null, 5, 6],
          nf: [0, 0, 0, 0, 0],
        },
      },
    });
    assert.equal(both.lastStep, 31);
  });

  test("leaves both stores as they were", () => {
    const left = new Columns();
    left.appendRecord(record(0, { a: 1 }));
    const right = new Columns();
    right.appendRecord(record(1, { b: 2 }));
    const both = left.concat(right);
    both.appendRecord(record(2, { a: 3, b: 4 }));
    assert.deepEqual(left.steps, [0]);
    assert.deepEqual(left.keys(), ["loss.a"]);
    assert.deepEqual(left.cols.get("loss.a").mean, [1]);
    assert.deepEqual(right.steps, [1]);
    assert.deepEqual(right.cols.get("loss.b").mean, [2]);
  });

  test("with an empty store on either side", () => {
    const some = new Columns();
    some.appendRecord(record(0, { a: 1 }));
    assert.deepEqual(dump(new Columns().concat(some)), dump(some));
    assert.deepEqual(dump(some.concat(new Columns())), dump(some));
    assert.equal(new Columns().concat(new Columns()).length, 0);
  });

  test("step 0 fetched late goes in front of the live points (the run view's way)", () => {
    const live = new Columns();
    live.appendRecord(record(1, { a: 1 }));
    const head = new Columns();
    head.appendRecord(record(0, { a: 0, b: 9 }));
    const both = head.concat(live);
    assert.deepEqual(both.steps, [0, 1]);
    assert.deepEqual(both.cols.get("loss.a").mean, [0, 1]);
    assert.deepEqual(both.cols.get("loss.b").mean, [9, null]);
  });
});

describe("Columns.slice", () => {
  const columns = new Columns();
  for (const step of [0, 2, 4, 6, 8]) columns.appendRecord(record(step, { a: step * 10 }));

  test("points whose step is in [lo, hi], both ends included", () => {
    const part = columns.slice(2, 6);
    assert.deepEqual(part.steps, [2, 4, 6]);
    assert.deepEqual(part.lastSteps, [2, 4, 6]);
    assert.deepEqual(part.times, [1002, 1004, 1006]);
    assert.deepEqual(part.cols.get("loss.a").mean, [20, 40, 60]);
  });

  test("ends between points, and open ends", () => {
    assert.deepEqual(columns.slice(1, 5).steps, [2, 4]);
    assert.deepEqual(columns.slice(null, 3).steps, [0, 2]);
    assert.deepEqual(columns.slice(5, null).steps, [6, 8]);
    assert.deepEqual(columns.slice(null, null).steps, [0, 2, 4, 6, 8]);
  });

  test("an empty range is an empty store that keeps the keys", () => {
    for (const [lo, hi] of [[9, null], [null, -1], [3, 3], [6, 2]]) {
      const part = columns.slice(lo, hi);
      assert.equal(part.length, 0, `[${lo}, ${hi}]`);
      assert.deepEqual(part.keys(), ["loss.a"]);
      assert.deepEqual(part.cols.get("loss.a").mean, []);
    }
  });

  test("copies: changing the slice leaves the store alone", () => {
    const part = columns.slice(0, 2);
    part.appendRecord(record(3, { a: 1 }));
    part.cols.get("loss.a").mean[0] = 99;
    assert.deepEqual(columns.steps, [0, 2, 4, 6, 8]);
    assert.equal(columns.cols.get("loss.a").mean[0], 0);
  });

  test("buckets are picked by their first step", () => {
    const buckets = Columns.fromHistory(downsampledBody());
    assert.deepEqual(buckets.slice(5, 25).steps, [10, 20]);
    assert.equal(buckets.slice(5, 25).lastStep, 29);
    // The live points after an overview: the run view keeps those past its last step.
    const live = new Columns();
    for (const step of [27, 28, 29, 30, 31]) live.appendRecord(record(step, { a: step }));
    assert.deepEqual(live.slice(buckets.lastStep + 1, null).steps, [30, 31]);
  });

  test("a step stored twice is kept twice", () => {
    const twice = new Columns();
    for (const step of [0, 1, 1, 2]) twice.appendRecord(record(step, { a: step }));
    assert.deepEqual(twice.slice(1, 1).steps, [1, 1]);
  });
});

describe("smooth", () => {
  test("no weight: the values themselves", () => {
    const values = [1, null, 3];
    assert.equal(smooth(values, 0), values);
    assert.equal(smooth(values, undefined), values);
  });

  test("debiased EMA: the first point is not pulled towards 0", () => {
    const out = smooth([10, 20, 30], 0.5);
    assert.equal(out[0], 10);
    assert.ok(Math.abs(out[1] - 50 / 3) < 1e-12, out[1]);
    assert.ok(Math.abs(out[2] - (0.5 * 12.5 + 15) / 0.875) < 1e-12, out[2]);
  });

  test("a constant stays constant", () => {
    for (const value of smooth(new Array(50).fill(3), 0.9)) assert.ok(Math.abs(value - 3) < 1e-9, value);
  });

  test("empty points stay empty and do not reset the average", () => {
    const out = smooth([10, null, 20, undefined], 0.5);
    assert.equal(out[0], 10);
    assert.equal(out[1], null);
    assert.ok(Math.abs(out[2] - 50 / 3) < 1e-12, out[2]);
    assert.equal(out[3], null);
    assert.deepEqual(smooth([null, 4], 0.6), [null, 4]);
  });

  test("returns a new array, same length", () => {
    const values = [1, 2];
    const out = smooth(values, 0.3);
    assert.notEqual(out, values);
    assert.deepEqual(values, [1, 2]);
    assert.equal(smooth([], 0.5).length, 0);
  });
});

describe("wallClock", () => {
  const withTimes = (steps, times) => Object.assign(new Columns(), { steps, lastSteps: steps.slice(), times });

  test("null when no point has a time", () => {
    assert.equal(wallClock(new Columns()), null);
    assert.equal(wallClock(withTimes([0, 1], [null, undefined])), null);
  });

  test("known times as they are", () => {
    assert.deepEqual(wallClock(withTimes([0, 1, 2], [5, 6, 8])), [5, 6, 8]);
  });

  test("an unknown time is interpolated by step, not by index", () => {
    assert.deepEqual(wallClock(withTimes([0, 10, 40], [100, null, 400])), [100, 175, 400]);
    assert.deepEqual(wallClock(withTimes([0, 1, 2, 4], [0, null, null, 40])), [0, 10, 20, 40]);
  });

  test("unknown at the ends: the nearest known time", () => {
    assert.deepEqual(wallClock(withTimes([0, 1, 2, 3, 4], [null, null, 50, 60, null])), [50, 50, 50, 60, 60]);
  });

  test("never goes backwards (a clock set back)", () => {
    assert.deepEqual(wallClock(withTimes([0, 1, 2, 3], [100, 90, 95, 110])), [100, 100, 100, 110]);
  });
});

describe("mapAlong", () => {
  const steps = [0, 10, 20];
  const times = [100, 200, 400];

  test("exact points and linear interpolation between them", () => {
    assert.equal(mapAlong(steps, times, 10), 200);
    assert.equal(mapAlong(steps, times, 5), 150);
    assert.equal(mapAlong(steps, times, 15), 300);
    assert.equal(mapAlong(times, steps, 300), 15);
  });

  test("clamped to the ends", () => {
    assert.equal(mapAlong(steps, times, -5), 100);
    assert.equal(mapAlong(steps, times, 0), 100);
    assert.equal(mapAlong(steps, times, 20), 400);
    assert.equal(mapAlong(steps, times, 1e9), 400);
  });

  test("an empty mapping gives the value back; one point maps everything to it", () => {
    assert.equal(mapAlong([], [], 7), 7);
    assert.equal(mapAlong([3], [30], 1), 30);
    assert.equal(mapAlong([3], [30], 9), 30);
  });
});

describe("toCsv", () => {
  test("exact points: step, timestamp, the raw values; CRLF lines", () => {
    const columns = new Columns();
    columns.appendRecord({ step: 0, timestamp: 1.5, loss: { a: 0.25, b: "NaN" } });
    columns.appendRecord({ step: 1, loss: { a: "-Infinity" } });
    columns.appendRecord({ step: 2, timestamp: 3, loss: { a: null, b: 1e-9 } });
    assert.equal(
      toCsv(columns, ["loss.a", "loss.b"]),
      "step,timestamp,loss.a,loss.b\r\n0,1.5,0.25,NaN\r\n1,,-Infinity,\r\n2,3,,1e-9\r\n",
    );
  });

  test("only the asked series, in the asked order; an unknown one is empty", () => {
    const columns = new Columns();
    columns.appendRecord({ step: 7, timestamp: 1, loss: { a: 1, b: 2 } });
    assert.equal(toCsv(columns, ["loss.b", "loss.zz"]), "step,timestamp,loss.b,loss.zz\r\n7,1,2,\r\n");
    assert.equal(toCsv(columns, []), "step,timestamp\r\n7,1\r\n");
  });

  test("quotes fields as RFC 4180 says", () => {
    const columns = new Columns();
    columns.appendRecord({ step: 0, timestamp: 1, extra: { 'a,b"c': 1, "d\ne": 2, plain: 3 } });
    assert.equal(
      toCsv(columns, ['extra.a,b"c', "extra.d\ne", "extra.plain"]),
      'step,timestamp,"extra.a,b""c","extra.d\ne",extra.plain\r\n0,1,1,2,3\r\n',
    );
  });

  test("an empty store is the header alone", () => {
    assert.equal(toCsv(new Columns(), ["loss.a"]), "step,timestamp,loss.a\r\n");
  });

  test("buckets: first/last step and mean, min, max, non-finite count per series", () => {
    const columns = Columns.fromHistory(downsampledBody());
    assert.equal(
      toCsv(columns, ["loss.a"]),
      "step,last_step,timestamp,loss.a:mean,loss.a:min,loss.a:max,loss.a:nonfinite\r\n" +
        "0,9,100,1.5,1,2,0\r\n" +
        "10,19,110,,,,10\r\n" +
        "20,29,,3,2,4,2\r\n",
    );
  });

  test("exact points after buckets take the bucketed columns; a non-finite one counts 1", () => {
    const live = new Columns();
    live.appendRecord({ step: 30, timestamp: 130, loss: { a: "NaN" } });
    live.appendRecord({ step: 31, timestamp: 131, loss: { a: 8 } });
    const lines = toCsv(Columns.fromHistory(downsampledBody()).concat(live), ["loss.a"]).split("\r\n");
    assert.equal(lines.length, 7);
    assert.equal(lines[4], "30,30,130,NaN,NaN,NaN,1");
    assert.equal(lines[5], "31,31,131,8,8,8,0");
    assert.equal(lines[6], "");
  });
});

describe("replaceLastRecord", () => {
  test("the newest step sent again, completed, replaces its point", () => {
    const columns = new Columns();
    columns.appendRecord({ step: 1, timestamp: 10, loss: { actor_loss: 0.5 } });
    columns.appendRecord({ step: 2, timestamp: 11, loss: { actor_loss: 0.4 } });
    const completed = { step: 2, timestamp: 12, loss: { actor_loss: 0.4 }, reward: { mean: 0.3 } };
    assert.equal(columns.replaceLastRecord(completed), true);
    assert.deepEqual(columns.steps, [1, 2]);
    assert.deepEqual(columns.cols.get("reward.mean").mean, [null, 0.3]);
    assert.deepEqual(columns.cols.get("loss.actor_loss").mean, [0.5, 0.4]);
    assert.deepEqual(columns.times, [10, 12]);
  });

  test("another step is not replaced", () => {
    const columns = new Columns();
    columns.appendRecord({ step: 1, loss: { actor_loss: 0.5 } });
    assert.equal(columns.replaceLastRecord({ step: 0, loss: { actor_loss: 9 } }), false);
    assert.equal(new Columns().replaceLastRecord({ step: 0 }), false);
    assert.deepEqual(columns.cols.get("loss.actor_loss").mean, [0.5]);
  });
});
