// The pure parts of the Compare view's synced replay (compare_replay.js): one clock
// for every run of the comparison, on the view's x axis (step, seconds since each
// run's first record, or tokens), and what each chart shows at the clock's position:
// each run up to that x, and only the anomalies the replay has reached.
// No DOM here: unit-tested under Node (tests/compare_replay_logic.test.js).
//
// The replay runs in the browser, from the history the view already holds, rather
// than as one server playback per run: the server paces a playback per record
// (history/playback.py), so runs that log at different intervals, or a replay on the
// time axis, would drift apart; one clock over data already loaded cannot.

import { fmtCount, fmtDuration } from "./compare_logic.js";
import { fmtStep } from "./format.js";
import { MAX_SPEED, MIN_SPEED, fmtSpeed } from "./playback_logic.js";

/** The speeds the replay offers (the single-run playback's range, 0.1× to 10×). */
export const REPLAY_SPEEDS = [0.1, 0.25, 0.5, 1, 2, 5, 10];
/**
 * Seconds a replay of the whole span lasts at 1× (10× takes 6 s, 0.1× ten minutes):
 * speed is relative to the comparison, as wall-clock time on the time axis (runs of
 * hours or days) or a fixed rate of steps (runs of 100 or 100,000 steps) would not be.
 */
export const REPLAY_SECONDS = 60;

export { fmtSpeed };

/**
 * The first and last known x of a run (a column store, compare_logic.js), or null.
 * On the step axis the last is the last step the run holds: a downsampled bucket sits
 * at its first step, and an anomaly in the last bucket must still be reached.
 */
export function runExtent(run, mode = "step") {
  let first = null;
  let last = null;
  for (const x of run.x) {
    if (x === null || x === undefined) continue;
    if (first === null || x < first) first = x;
    if (last === null || x > last) last = x;
  }
  if (first === null) return null;
  const lastStep = mode === "step" && run.lastSteps ? run.lastSteps[run.lastSteps.length - 1] : null;
  if (typeof lastStep === "number" && lastStep > last) last = lastStep;
  return { first, last };
}

/** What the replay covers on the axis `mode`: from the first x of any run to the last of any, or null. */
export function replaySpan(runs, mode = "step") {
  let span = null;
  for (const run of runs) {
    const extent = runExtent(run, mode);
    if (!extent) continue;
    span = span ? { start: Math.min(span.start, extent.first), end: Math.max(span.end, extent.last) }
      : { start: extent.first, end: extent.last };
  }
  return span;
}

function clampSpeed(speed) {
  return Number.isFinite(speed) ? Math.min(MAX_SPEED, Math.max(MIN_SPEED, speed)) : 1;
}

/**
 * The shared clock. `state`: "off" (no replay: the charts show everything),
 * "playing", "paused" or "ended" (the position reached the span's end). The
 * position moves at (end - start) / REPLAY_SECONDS x-units a second at 1×, from an
 * anchor (the position and the time it was set), so a slow frame never adds up.
 * `now()` (milliseconds) is injected: tests drive the clock by hand.
 */
export class ReplayClock {
  constructor({ now = () => performance.now(), speed = 1 } = {}) {
    this.now = now;
    this.speed = clampSpeed(speed);
    this.state = "off";
    this.span = null;
    this.anchorX = 0;
    this.anchorT = 0;
  }

  /** x units per millisecond at the current speed. */
  rate() {
    if (!this.span) return 0;
    return ((this.span.end - this.span.start) / (REPLAY_SECONDS * 1000)) * this.speed;
  }

  /** The position now (null when off); "playing" turns "ended" at the span's end. */
  position() {
    if (this.state === "off" || !this.span) return null;
    if (this.state !== "playing") return this.anchorX;
    const x = this.anchorX + (this.now() - this.anchorT) * this.rate();
    if (x < this.span.end) return x;
    this.anchor(this.span.end);
    this.state = "ended";
    return this.span.end;
  }

  anchor(x) {
    this.anchorX = this.span ? Math.min(this.span.end, Math.max(this.span.start, x)) : x;
    this.anchorT = this.now();
  }

  /**
   * The runs' span, set again when they change (a live record, a run removed): the
   * position stays where it was (within the new span), so nothing jumps.
   */
  setSpan(span) {
    const at = this.position();
    this.span = span;
    if (!span) {
      this.state = "off";
      return;
    }
    if (at !== null) this.anchor(at);
    if (this.state === "ended" && this.anchorX < span.end) this.state = "paused";
  }

  /** Play from the position; from the start when off or at the end. */
  play() {
    if (!this.span) return;
    const at = this.position();
    this.anchor(at === null || at >= this.span.end ? this.span.start : at);
    this.state = this.span.end > this.span.start ? "playing" : "ended";
  }

  pause() {
    if (this.state !== "playing") return;
    this.anchor(this.position());
    if (this.state === "playing") this.state = "paused";
  }

  /** Move to `x` (clamped to the span); a playing replay plays on from there. */
  seek(x) {
    if (!this.span || !Number.isFinite(x)) return;
    this.anchor(x);
    if (this.state === "off" || this.state === "ended") this.state = "paused";
    if (this.anchorX >= this.span.end && this.state === "paused") this.state = "ended";
  }

  setSpeed(speed) {
    const at = this.position();
    this.speed = clampSpeed(speed);
    if (at !== null) this.anchor(at);
  }

  /** Leave the replay: the charts show everything again. */
  stop() {
    this.state = "off";
  }
}

/** How many of the sorted `xs` are at or before `position` (all of them when null). */
export function prefixLength(xs, position) {
  if (position === null || position === undefined) return xs.length;
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] <= position) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A merged chart (compare_logic.js, mergeRuns) cut to its first `k` x values. */
export function cutMerged(merged, k) {
  if (k >= merged.xs.length) return merged;
  return {
    xs: merged.xs.slice(0, k),
    perRun: merged.perRun.map((run) => ({
      line: run.line.slice(0, k),
      min: run.min.slice(0, k),
      max: run.max.slice(0, k),
      present: run.present.slice(0, prefixLength(run.present, k - 1)),
    })),
  };
}

/**
 * uPlot's data columns cut to the first `k` points. uPlot needs an x to draw on, so
 * with no point reached yet the first x stays, with every series empty there.
 */
export function cutData(data, k) {
  if (k >= data[0].length) return data;
  if (k > 0) return data.map((column) => column.slice(0, k));
  return data.map((column, i) => (i === 0 ? column.slice(0, 1) : [null]));
}

/** The placed anomalies (compare_controls.js, anomalyXs) the replay has reached. */
export function reachedAnomalies(placed, position) {
  if (position === null || position === undefined) return placed;
  return placed.filter(({ x }) => x <= position);
}

/**
 * Where each run stands at `position`: `{jobId, x, started, ended}`, its x being the
 * position held at the run's own last x (a run that ended earlier stops there while
 * the others go on); `x` is null for a run with no x at all.
 */
export function runPositions(runs, position, mode = "step") {
  return runs.map((run) => {
    const extent = runExtent(run, mode);
    if (!extent) return { jobId: run.jobId, x: null, started: false, ended: false };
    return {
      jobId: run.jobId,
      x: Math.min(position, extent.last),
      started: position >= extent.first,
      ended: position >= extent.last,
    };
  });
}

/** An x of the axis `mode` as the replay's progress writes it. */
export function fmtReplayX(mode, x) {
  if (x === null || x === undefined) return "–";
  if (mode === "time") return fmtDuration(x);
  if (mode === "tokens") return `${fmtCount(x)} tokens`;
  return `step ${fmtStep(Math.floor(x))}`;
}

/** The progress line: "step 120 / 500", "12m 30s / 1h 05m", "1.2M tokens / 3.4M tokens". */
export function progressText(mode, position, span) {
  if (!span) return "nothing to replay";
  const end = mode === "step" ? fmtStep(span.end) : fmtReplayX(mode, span.end);
  return `${fmtReplayX(mode, position ?? span.start)} / ${end}`;
}
