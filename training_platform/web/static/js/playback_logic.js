// The pure parts of the playback view (playback_view.js): the speed the server
// accepts, where a seek may land, and which series a run has at all (so charts the
// run never records are not shown). No DOM here: unit-tested under Node
// (tests/playback_logic.test.js).

import { fmtStep } from "./format.js";

// The server's limits (history/playback.py, MIN_SPEED and MAX_SPEED): a speed
// outside them is refused with an error while the playback goes on at its old speed.
export const MIN_SPEED = 0.1;
export const MAX_SPEED = 10;

/** "2×", "0.5×". */
export function fmtSpeed(speed) {
  return `${Number(speed.toFixed(2))}×`;
}

/**
 * A typed speed: {speed} when the server accepts it, else {error} saying the range.
 * Nothing out of range is ever sent, so the UI never shows a speed it does not play.
 */
export function parseSpeed(text) {
  const trimmed = String(text ?? "").trim();
  const speed = trimmed === "" ? NaN : Number(trimmed);
  const range = `${fmtSpeed(MIN_SPEED)} to ${fmtSpeed(MAX_SPEED)}`;
  if (!Number.isFinite(speed)) return { error: `Speed must be a number from ${range}.` };
  if (speed < MIN_SPEED || speed > MAX_SPEED) {
    return { error: `Speed ${trimmed}× is out of range: choose from ${range}.` };
  }
  return { speed };
}

/**
 * A typed seek step within the playback's range [lo, hi] (the `playback_info`
 * message's start_step and end_step): {step} or {error}.
 */
export function parseSeek(text, lo, hi) {
  const trimmed = String(text ?? "").trim();
  const step = trimmed === "" ? NaN : Number(trimmed);
  if (!Number.isFinite(step)) return { error: "Type the step to seek to." };
  const target = Math.round(step);
  if (lo !== null && lo !== undefined && hi !== null && hi !== undefined && (target < lo || target > hi)) {
    return { error: `Step ${fmtStep(target)} is outside this playback: seek from ${fmtStep(lo)} to ${fmtStep(hi)}.` };
  }
  return { step: target };
}

/**
 * The series of a `?max_points=` history answer that hold at least one value (a
 * number, or a NaN/infinity): what the run records at all. null when the answer
 * cannot tell (series left out by the server's caps).
 */
export function seriesWithValues(body) {
  if (!body || body.truncated || !body.series) return null;
  const keys = new Set();
  for (const [key, series] of Object.entries(body.series)) {
    const held = body.downsampled
      ? (series.mean || []).some((v) => v !== null) || (series.nonfinite || []).some((n) => n > 0)
        || (series.min || []).some((v) => v !== null)
      : (series.values || []).some((v) => v !== null && v !== undefined);
    if (held) keys.add(key);
  }
  return keys;
}

/**
 * The line shown before Play: that playback has not started, and what it will
 * replay. `job` is the API's job (its `metrics_count`), `first`/`last` the run's
 * first and last stored steps (null: nothing stored).
 */
export function prePlayText(job, first, last) {
  if (first === null || first === undefined || !job || !job.metrics_count) {
    return "This run has no stored records yet: there is nothing to replay.";
  }
  const records = `${job.metrics_count.toLocaleString("en-US")} record${job.metrics_count === 1 ? "" : "s"}`;
  const steps = first === last ? `step ${fmtStep(first)}` : `steps ${fmtStep(first)}–${fmtStep(last)}`;
  return `Playback has not started. Press Play to replay this run (${records}, ${steps}); the charts fill in as it plays.`;
}
