// Column store of a run's series: what the REST history and the live stream feed,
// what the charts read.
//
// One point per step (live, exact history) or per bucket of steps (downsampled
// history). Every series keeps four aligned arrays: `mean`, `min`, `max` (equal for
// an exact point) and `nf`, which marks non-finite values: 0, the string of an
// exact point ("NaN", "Infinity", "-Infinity"), or how many a bucket held. A NaN
// step is therefore a point with null values and a mark, never a dropped point.
// `times` holds each point's wall-clock time (Unix seconds, the record's
// `timestamp`; for a bucket, its first step's), null where unknown.

import { NONFINITE } from "./format.js";

const GROUPS = ["loss", "reward", "kl", "gradient", "performance", "timing", "extra"];

/** {"group.field": number | "NaN" | ...} of one record (docs/contract.md §2's nested shape). */
export function flattenRecord(record) {
  const out = {};
  const take = (group, fields) => {
    if (!fields || typeof fields !== "object") return;
    for (const [name, value] of Object.entries(fields)) {
      if (typeof value === "number" || NONFINITE.has(value)) out[`${group}.${name}`] = value;
    }
  };
  for (const group of GROUPS) take(group, record[group]);
  for (const [group, fields] of Object.entries(record.other || {})) take(group, fields);
  return out;
}

export class Columns {
  constructor() {
    this.steps = [];
    this.lastSteps = [];
    this.times = [];
    this.cols = new Map();
  }

  get length() {
    return this.steps.length;
  }

  get firstStep() {
    return this.steps.length ? this.steps[0] : null;
  }

  get lastStep() {
    return this.lastSteps.length ? this.lastSteps[this.lastSteps.length - 1] : null;
  }

  keys() {
    return [...this.cols.keys()];
  }

  /** The series `key`, created (padded with empty points) when new. */
  column(key) {
    let column = this.cols.get(key);
    if (!column) {
      const n = this.steps.length;
      column = {
        mean: new Array(n).fill(null),
        min: new Array(n).fill(null),
        max: new Array(n).fill(null),
        nf: new Array(n).fill(0),
      };
      this.cols.set(key, column);
    }
    return column;
  }

  /** From a `?max_points=` history answer (exact or downsampled). */
  static fromHistory(body) {
    const columns = new Columns();
    columns.steps = body.steps.slice();
    columns.lastSteps = body.downsampled ? body.last_steps.slice() : body.steps.slice();
    columns.times = body.timestamps ? body.timestamps.slice() : new Array(body.steps.length).fill(null);
    for (const [key, series] of Object.entries(body.series)) {
      if (body.downsampled) {
        columns.cols.set(key, {
          mean: series.mean,
          min: series.min,
          max: series.max,
          nf: series.nonfinite,
        });
        continue;
      }
      const column = { mean: [], min: [], max: [], nf: [] };
      for (const value of series.values) pushValue(column, value);
      columns.cols.set(key, column);
    }
    return columns;
  }

  /** Append one record as an exact point (the caller keeps steps increasing). */
  appendRecord(record) {
    const values = flattenRecord(record);
    const index = this.steps.length;
    for (const key of Object.keys(values)) this.column(key); // new series: padded first
    this.steps.push(record.step);
    this.lastSteps.push(record.step);
    this.times.push(Number.isFinite(record.timestamp) ? record.timestamp : null);
    for (const [key, column] of this.cols) {
      if (key in values) pushValue(column, values[key]);
      else pushValue(column, null);
      if (column.mean.length !== index + 1) throw new Error(`column ${key} out of step`);
    }
  }

  /**
   * Replace the last point by `record` when it is the same step (another tool's
   * tags for a step arrive in separate reads: the server sends the step again,
   * completed); false, and nothing changed, when the last point is another step.
   */
  replaceLastRecord(record) {
    const index = this.steps.length - 1;
    if (index < 0 || this.steps[index] !== record.step) return false;
    this.steps.pop();
    this.lastSteps.pop();
    this.times.pop();
    for (const column of this.cols.values()) {
      for (const part of [column.mean, column.min, column.max, column.nf]) part.pop();
    }
    this.appendRecord(record);
    return true;
  }

  /** A new store with `other`'s points after this one's (keys united). */
  concat(other) {
    const out = new Columns();
    out.steps = this.steps.concat(other.steps);
    out.lastSteps = this.lastSteps.concat(other.lastSteps);
    out.times = this.times.concat(other.times);
    const keys = new Set([...this.keys(), ...other.keys()]);
    for (const key of keys) {
      const a = this.cols.get(key) || emptyColumn(this.length);
      const b = other.cols.get(key) || emptyColumn(other.length);
      out.cols.set(key, {
        mean: a.mean.concat(b.mean),
        min: a.min.concat(b.min),
        max: a.max.concat(b.max),
        nf: a.nf.concat(b.nf),
      });
    }
    return out;
  }

  /** Points whose step is in [lo, hi] (either end may be null: open). */
  slice(lo, hi) {
    let start = 0;
    let end = this.steps.length;
    if (lo !== null) start = lowerBound(this.steps, lo);
    if (hi !== null) end = lowerBound(this.steps, hi + 1);
    const out = new Columns();
    out.steps = this.steps.slice(start, end);
    out.lastSteps = this.lastSteps.slice(start, end);
    out.times = this.times.slice(start, end);
    for (const [key, c] of this.cols) {
      out.cols.set(key, {
        mean: c.mean.slice(start, end),
        min: c.min.slice(start, end),
        max: c.max.slice(start, end),
        nf: c.nf.slice(start, end),
      });
    }
    return out;
  }
}

function emptyColumn(n) {
  return {
    mean: new Array(n).fill(null),
    min: new Array(n).fill(null),
    max: new Array(n).fill(null),
    nf: new Array(n).fill(0),
  };
}

function pushValue(column, value) {
  if (typeof value === "number") {
    column.mean.push(value);
    column.min.push(value);
    column.max.push(value);
    column.nf.push(0);
  } else {
    column.mean.push(null);
    column.min.push(null);
    column.max.push(null);
    column.nf.push(NONFINITE.has(value) ? value : 0);
  }
}

function lowerBound(sorted, value) {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Exponential moving average as TensorBoard draws it (debiased, so the start is not
 * pulled towards 0); empty points stay empty and do not reset the average.
 */
export function smooth(values, weight) {
  if (!weight) return values;
  const out = new Array(values.length);
  let last = 0;
  let count = 0;
  for (let i = 0; i < values.length; i += 1) {
    const value = values[i];
    if (value === null || value === undefined) {
      out[i] = null;
      continue;
    }
    last = last * weight + (1 - weight) * value;
    count += 1;
    out[i] = last / (1 - weight ** count);
  }
  return out;
}

/**
 * The wall-clock x values of `columns` (Unix seconds), or null when no point has a
 * time. Points without one get a time interpolated by step between their known
 * neighbours (or the nearest known time at the ends), and the result never goes
 * backwards, because uPlot needs ascending x values (a clock set back would
 * otherwise fold the line over itself).
 */
export function wallClock(columns) {
  const { steps, times } = columns;
  const known = [];
  for (let i = 0; i < steps.length; i += 1) if (times[i] !== null && times[i] !== undefined) known.push(i);
  if (!known.length) return null;
  const out = new Array(steps.length);
  let k = 0;
  for (let i = 0; i < steps.length; i += 1) {
    while (k < known.length - 1 && known[k + 1] <= i) k += 1;
    const a = known[k];
    if (i === a || i < known[0] || k === known.length - 1) {
      out[i] = times[i < known[0] ? known[0] : i === a ? a : known[known.length - 1]];
    } else {
      const b = known[k + 1];
      out[i] = times[a] + ((steps[i] - steps[a]) / (steps[b] - steps[a])) * (times[b] - times[a]);
    }
  }
  for (let i = 1; i < out.length; i += 1) if (out[i] < out[i - 1]) out[i] = out[i - 1];
  return out;
}

/**
 * Linear map of `value` from the ascending array `from` onto the aligned `to`
 * (step → wall-clock time and back); clamped to the ends.
 */
export function mapAlong(from, to, value) {
  const n = from.length;
  if (!n) return value;
  if (value <= from[0]) return to[0];
  if (value >= from[n - 1]) return to[n - 1];
  const i = lowerBound(from, value);
  if (from[i] === value) return to[i];
  const span = from[i] - from[i - 1];
  return to[i - 1] + (span ? ((value - from[i - 1]) / span) * (to[i] - to[i - 1]) : 0);
}

/**
 * The points of `columns` for the series `keys` as CSV text (RFC 4180 quoting).
 * Exact data: `step,timestamp,<key>...` with each raw value. Any bucket in it
 * (a downsampled history): `step,last_step,timestamp` and per series
 * `<key>:mean,<key>:min,<key>:max,<key>:nonfinite` (how many values of the bucket
 * were NaN or infinite). Non-finite values are written as NaN, Infinity,
 * -Infinity; a missing value (or time) is an empty field.
 */
export function toCsv(columns, keys) {
  const bucketed = columns.lastSteps.some((last, i) => last !== columns.steps[i]);
  const header = bucketed ? ["step", "last_step", "timestamp"] : ["step", "timestamp"];
  for (const key of keys) {
    if (bucketed) header.push(`${key}:mean`, `${key}:min`, `${key}:max`, `${key}:nonfinite`);
    else header.push(key);
  }
  const lines = [header.map(csvField).join(",")];
  const cols = keys.map((key) => columns.cols.get(key) || emptyColumn(columns.length));
  for (let i = 0; i < columns.length; i += 1) {
    const row = bucketed ? [columns.steps[i], columns.lastSteps[i]] : [columns.steps[i]];
    row.push(columns.times[i] ?? "");
    for (const column of cols) {
      const mark = column.nf[i];
      if (!bucketed) {
        row.push(typeof mark === "string" ? mark : column.mean[i] ?? "");
      } else if (typeof mark === "string") {
        row.push(mark, mark, mark, 1); // an exact non-finite point inside bucketed data
      } else {
        row.push(column.mean[i] ?? "", column.min[i] ?? "", column.max[i] ?? "", mark || 0);
      }
    }
    lines.push(row.map(csvField).join(","));
  }
  return `${lines.join("\r\n")}\r\n`;
}

/** One CSV field, quoted when it must be (RFC 4180). */
export function csvField(value) {
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}
