// Unit tests of static/js/playback_logic.js (`npm test`, docs/dashboard.md): the speeds
// the server accepts, seeks within the playback's range, the series a run records
// at all, and the line shown before Play.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  MAX_SPEED, MIN_SPEED, fmtSpeed, parseSeek, parseSpeed, prePlayText, seriesWithValues,
} from "../static/js/playback_logic.js";

describe("speed", () => {
  test("the server's range, ends included", () => {
    assert.deepEqual(parseSpeed("0.1"), { speed: MIN_SPEED });
    assert.deepEqual(parseSpeed(" 10 "), { speed: MAX_SPEED });
    assert.deepEqual(parseSpeed("2.5"), { speed: 2.5 });
  });

  test("out of range or not a number is refused, saying the range", () => {
    for (const text of ["20", "0.05", "0", "-1", "10.01"]) {
      assert.match(parseSpeed(text).error, /out of range: choose from 0\.1× to 10×/, text);
      assert.equal(parseSpeed(text).speed, undefined);
    }
    for (const text of ["", "fast", "NaN", "Infinity", null]) {
      assert.match(parseSpeed(text).error, /must be a number from 0\.1× to 10×/, String(text));
    }
  });

  test("shown as a multiplier", () => {
    assert.equal(fmtSpeed(1), "1×");
    assert.equal(fmtSpeed(0.1), "0.1×");
    assert.equal(fmtSpeed(2.345), "2.35×");
  });
});

describe("seek", () => {
  test("a step inside the range, rounded", () => {
    assert.deepEqual(parseSeek("150", 0, 199), { step: 150 });
    assert.deepEqual(parseSeek("12.6", 10, 20), { step: 13 });
    assert.deepEqual(parseSeek("10", 10, 20), { step: 10 });
    assert.deepEqual(parseSeek("5", undefined, undefined), { step: 5 });
  });

  test("outside the range or empty is refused", () => {
    assert.equal(parseSeek("500", 0, 199).error, "Step 500 is outside this playback: seek from 0 to 199.");
    assert.match(parseSeek("", 0, 199).error, /Type the step/);
  });
});

describe("series the run records", () => {
  test("exact answer: only series with a value", () => {
    const body = { downsampled: false, series: {
      "loss.actor_loss": { values: [1, 2] },
      "performance.gpu_memory_allocated": { values: [null, null] },
      "loss.nan": { values: ["NaN", null] },
    } };
    assert.deepEqual([...seriesWithValues(body)].sort(), ["loss.actor_loss", "loss.nan"]);
  });

  test("downsampled answer: a mean, or a bucket of only non-finite values", () => {
    const body = { downsampled: true, series: {
      a: { mean: [null, 1], min: [null, 1], max: [null, 1], nonfinite: [0, 0] },
      b: { mean: [null], min: [null], max: [null], nonfinite: [2] },
      c: { mean: [null], min: [null], max: [null], nonfinite: [0] },
    } };
    assert.deepEqual([...seriesWithValues(body)].sort(), ["a", "b"]);
  });

  test("unknown when the answer is cut or missing", () => {
    assert.equal(seriesWithValues(null), null);
    assert.equal(seriesWithValues({ truncated: true, series: {} }), null);
  });
});

describe("before Play", () => {
  test("says playback has not started and what it will replay", () => {
    assert.equal(prePlayText({ metrics_count: 81 }, 0, 110),
      "Playback has not started. Press Play to replay this run (81 records, steps 0–110); the charts fill in as it plays.");
    assert.match(prePlayText({ metrics_count: 1 }, 7, 7), /\(1 record, step 7\)/);
    assert.match(prePlayText({ metrics_count: 3000 }, 0, 2999), /3,000 records, steps 0–2,999/);
  });

  test("nothing stored: nothing to replay", () => {
    assert.match(prePlayText({ metrics_count: 0 }, null, null), /no stored records yet/);
  });
});
