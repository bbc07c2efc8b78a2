// Column store of a run's series: what the REST history and the live stream feed,
// what the charts read.
//
// One point per step (live, exact history) or per bucket of steps (downsampled
// history). Every series keeps four aligned arrays: `mean`, `min`, `max` (equal for
// an exact point) and `nf`, which marks non-finite values: 0, the string of an
// exact point ("NaN", "Infinity", "-Infinity"), or how many a bucket held. A NaN
// step is therefore a point with null values and a mark, never a dropped point.

import { NONFINITE } from "./format.js";

const GROUPS = ["loss", "reward", "kl", "gradient", "performance", "timing", "extra"];

/** {"group.field": number | "NaN" | ...} of one record (DESIGN.md's nested shape). */
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
    for (const [key, column] of this.cols) {
      if (key in values) pushValue(column, values[key]);
      else pushValue(column, null);
      if (column.mean.length !== index + 1) throw new Error(`column ${key} out of step`);
    }
  }

  /** A new store with `other`'s points after this one's (keys united). */
  concat(other) {
    const out = new Columns();
    out.steps = this.steps.concat(other.steps);
    out.lastSteps = this.lastSteps.concat(other.lastSteps);
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
