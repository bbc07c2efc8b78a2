// Unit tests of static/js/compare_replay_logic.js (`npm test`, docs/dashboard.md): the
// shared clock of the Compare view's replay (speed, pause, seek, the end), each run's
// prefix and position at the clock's x, and which anomalies the replay has reached.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { mergeRuns } from "../static/js/compare_logic.js";
import {
  REPLAY_SECONDS, REPLAY_SPEEDS, ReplayClock, cutData, cutMerged, prefixLength, progressText,
  reachedAnomalies, replaySpan, runExtent, runPositions,
} from "../static/js/compare_replay_logic.js";

/** A clock whose time moves only when the test says so. */
function manualClock(options = {}) {
  const time = { ms: 0 };
  const clock = new ReplayClock({ now: () => time.ms, ...options });
  return { clock, advance: (ms) => { time.ms += ms; } };
}

/** A run as a column store (compare_logic.js), `key` holding x * 10 at each x. */
function run(jobId, xs, key = "reward.mean") {
  const values = xs.map((x) => (x === null ? null : x * 10));
  return {
    jobId, x: xs, steps: xs.map((x, i) => i), lastSteps: xs.map((x, i) => i),
    series: new Map([[key, { mean: values, min: values, max: values, line: values }]]),
  };
}

describe("the span and each run's extent", () => {
  test("from the first x of any run to the last of any", () => {
    const a = run("a", [0, 1, 2, 49]);
    const b = run("b", [null, 5, 99]);
    assert.deepEqual(runExtent(a), { first: 0, last: 49 });
    assert.deepEqual(runExtent(b), { first: 5, last: 99 });
    assert.deepEqual(replaySpan([a, b]), { start: 0, end: 99 });
  });

  test("on the step axis a run ends at its last step, past its last bucket's first", () => {
    const bucketed = { ...run("a", [0, 100, 200]), lastSteps: [99, 199, 299] };
    assert.deepEqual(runExtent(bucketed, "step"), { first: 0, last: 299 });
    assert.deepEqual(replaySpan([bucketed], "step"), { start: 0, end: 299 });
    // Seconds or tokens: the x of the last point (anomalies sit at their point's x there).
    assert.deepEqual(runExtent(bucketed, "time"), { first: 0, last: 200 });
    assert.deepEqual(runPositions([bucketed], 250, "time")[0], { jobId: "a", x: 200, started: true, ended: true });
    assert.deepEqual(runPositions([bucketed], 250, "step")[0], { jobId: "a", x: 250, started: true, ended: false });
  });

  test("runs without any x add nothing; none at all is no span", () => {
    assert.equal(runExtent(run("t", [null, null])), null);
    assert.equal(replaySpan([run("t", [null])]), null);
    assert.equal(replaySpan([]), null);
  });
});

describe("the clock", () => {
  test("off until played, then from the start at the span's rate", () => {
    const { clock, advance } = manualClock();
    clock.setSpan({ start: 0, end: 600 });
    assert.equal(clock.state, "off");
    assert.equal(clock.position(), null);
    clock.play();
    assert.equal(clock.state, "playing");
    assert.equal(clock.position(), 0);
    advance(1000); // 1×: the whole span in REPLAY_SECONDS
    assert.equal(clock.position(), 600 / REPLAY_SECONDS);
  });

  test("speed scales the rate without a jump, and stays in 0.1×–10×", () => {
    const { clock, advance } = manualClock();
    clock.setSpan({ start: 0, end: 600 });
    clock.play();
    advance(1000);
    clock.setSpeed(10);
    assert.equal(clock.position(), 10);
    advance(1000);
    assert.equal(clock.position(), 110);
    clock.setSpeed(50);
    assert.equal(clock.speed, 10);
    clock.setSpeed(0.01);
    assert.equal(clock.speed, 0.1);
    clock.setSpeed(Number.NaN);
    assert.equal(clock.speed, 1);
    assert.deepEqual([REPLAY_SPEEDS[0], REPLAY_SPEEDS.at(-1)], [0.1, 10]);
    for (const speed of [0.5, 1, 2, 5]) assert.ok(REPLAY_SPEEDS.includes(speed));
  });

  test("pause holds the position however long; resume goes on from it", () => {
    const { clock, advance } = manualClock({ speed: 10 });
    clock.setSpan({ start: 0, end: 600 });
    clock.play();
    advance(500);
    clock.pause();
    assert.equal(clock.state, "paused");
    assert.equal(clock.position(), 50);
    advance(60_000);
    assert.equal(clock.position(), 50);
    clock.play();
    advance(100);
    assert.equal(clock.position(), 60);
  });

  test("stops at the end, and Play from the end starts again", () => {
    const { clock, advance } = manualClock({ speed: 10 });
    clock.setSpan({ start: 5, end: 605 });
    clock.play();
    advance(7000); // 10×: the span in 6 s
    assert.equal(clock.position(), 605);
    assert.equal(clock.state, "ended");
    advance(1000);
    assert.equal(clock.position(), 605);
    clock.play();
    assert.equal(clock.position(), 5);
    assert.equal(clock.state, "playing");
  });

  test("a seek lands inside the span; paused or off stays paused there, playing plays on", () => {
    const { clock, advance } = manualClock();
    clock.setSpan({ start: 0, end: 600 });
    clock.seek(300);
    assert.equal(clock.state, "paused");
    assert.equal(clock.position(), 300);
    clock.seek(-5);
    assert.equal(clock.position(), 0);
    clock.seek(9999);
    assert.equal(clock.position(), 600);
    assert.equal(clock.state, "ended");
    clock.play();
    clock.seek(120);
    advance(1000);
    assert.equal(clock.position(), 130);
    clock.seek(Number.NaN);
    assert.equal(clock.position(), 130);
  });

  test("a growing span (live records) keeps the position; an end reached becomes a pause", () => {
    const { clock, advance } = manualClock({ speed: 10 });
    clock.setSpan({ start: 0, end: 600 });
    clock.play();
    advance(3000);
    clock.setSpan({ start: 0, end: 1200 });
    assert.equal(clock.position(), 300);
    assert.equal(clock.state, "playing");
    clock.seek(1200);
    clock.setSpan({ start: 0, end: 1500 });
    assert.equal(clock.state, "paused");
    assert.equal(clock.position(), 1200);
    clock.setSpan({ start: 0, end: 100 }); // a run taken out: clamped
    assert.equal(clock.position(), 100);
    clock.setSpan(null);
    assert.equal(clock.state, "off");
    assert.equal(clock.position(), null);
  });

  test("stop leaves the replay; Play starts it again from the start", () => {
    const { clock, advance } = manualClock();
    clock.setSpan({ start: 0, end: 600 });
    clock.play();
    advance(2000);
    clock.stop();
    assert.equal(clock.position(), null);
    clock.play();
    assert.equal(clock.position(), 0);
  });

  test("a span of one x ends at once", () => {
    const { clock } = manualClock();
    clock.setSpan({ start: 3, end: 3 });
    clock.play();
    assert.equal(clock.state, "ended");
    assert.equal(clock.position(), 3);
  });
});

describe("what the charts show at a position", () => {
  test("the prefix of sorted xs at or before the position", () => {
    const xs = [0, 10, 20, 30];
    assert.equal(prefixLength(xs, -1), 0);
    assert.equal(prefixLength(xs, 0), 1);
    assert.equal(prefixLength(xs, 19.9), 2);
    assert.equal(prefixLength(xs, 20), 3);
    assert.equal(prefixLength(xs, 99), 4);
    assert.equal(prefixLength(xs, null), 4);
    assert.equal(prefixLength([], 5), 0);
  });

  test("each run drawn up to the position; one that ended earlier stays whole", () => {
    const short = run("a", [0, 10, 20]);
    const long = run("b", [0, 15, 30, 45]);
    const merged = mergeRuns([short, long], "reward.mean");
    assert.deepEqual(merged.xs, [0, 10, 15, 20, 30, 45]);
    const cut = cutMerged(merged, prefixLength(merged.xs, 32));
    assert.deepEqual(cut.xs, [0, 10, 15, 20, 30]);
    assert.deepEqual(cut.perRun[0].line, [0, 100, null, 200, null]);
    assert.deepEqual(cut.perRun[0].present, [0, 1, 3]);
    assert.deepEqual(cut.perRun[1].line, [0, null, 150, null, 300]);
    assert.deepEqual(cut.perRun[1].present, [0, 2, 4]);
    assert.equal(cutMerged(merged, 6), merged);
  });

  test("uPlot's columns cut alike, keeping one x when nothing is reached", () => {
    const data = [[0, 1, 2], [5, 6, 7], [8, null, 9]];
    assert.deepEqual(cutData(data, 2), [[0, 1], [5, 6], [8, null]]);
    assert.equal(cutData(data, 3), data);
    assert.deepEqual(cutData(data, 0), [[0], [null], [null]]);
  });

  test("an anomaly appears once the replay reaches its x, and not before", () => {
    const placed = [{ x: 15, anomaly: { step: 15 } }, { x: 70, anomaly: { step: 70 } }];
    assert.deepEqual(reachedAnomalies(placed, 60).map((p) => p.x), [15]);
    assert.deepEqual(reachedAnomalies(placed, 70).map((p) => p.x), [15, 70]);
    assert.deepEqual(reachedAnomalies(placed, 14.9), []);
    assert.equal(reachedAnomalies(placed, null), placed);
  });

  test("each run's position: a shorter run stops at its end while the others go on", () => {
    const runs = [run("a", [0, 49]), run("b", [10, 99]), run("none", [null])];
    assert.deepEqual(runPositions(runs, 5), [
      { jobId: "a", x: 5, started: true, ended: false },
      { jobId: "b", x: 5, started: false, ended: false },
      { jobId: "none", x: null, started: false, ended: false },
    ]);
    assert.deepEqual(runPositions(runs, 70).slice(0, 2), [
      { jobId: "a", x: 49, started: true, ended: true },
      { jobId: "b", x: 70, started: true, ended: false },
    ]);
  });
});

describe("the progress line", () => {
  test("in the x axis' own units", () => {
    assert.equal(progressText("step", 120.7, { start: 0, end: 5000 }), "step 120 / 5,000");
    assert.equal(progressText("step", null, { start: 3, end: 99 }), "step 3 / 99");
    assert.equal(progressText("time", 750, { start: 0, end: 3900 }), "12m 30s / 1h 05m");
    assert.equal(progressText("tokens", 1.2e6, { start: 0, end: 3.4e6 }), "1.2M tokens / 3.4M tokens");
    assert.equal(progressText("step", 5, null), "nothing to replay");
  });
});
