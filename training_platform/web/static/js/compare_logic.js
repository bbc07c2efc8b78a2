// The pure parts of the Compare view (compare_view.js): its URL state, a colour per
// run, the runs of a `GET /api/compare` answer as column stores, several runs merged
// onto one x axis for a chart, the value of each run under the cursor, live records
// appended with the smoothing continued, and the config-diff table's rows.
// No DOM here: unit-tested under Node (tests/compare_logic.test.js).

import { buildQuery, parseList, parseParams } from "./url_state.js";

/** The most runs one comparison holds (the API's limit, docs/contract.md). */
export const MAX_RUNS = 20;
/** The slider's range: an EMA weight of 0 (none) to 0.99. */
export const MAX_SMOOTHING = 0.99;
export const MAX_WINDOW = 100_000;

export const X_MODES = [
  { id: "step", label: "step" },
  { id: "time", label: "time since start" },
  { id: "tokens", label: "tokens seen" },
];

// Series shown when the URL names none: the usual RL curves, those the runs have.
export const DEFAULT_FIELDS = [
  "reward.mean", "loss.actor_loss", "loss.critic_loss", "kl.mean", "extra.actor/entropy",
  "gradient.actor_norm", "extra.response_length/mean", "performance.tokens_per_second",
];
const MAX_DEFAULT_CHARTS = 6;

// --- URL state ----------------------------------------------------------------------

/**
 * The Compare view's state from its hash query:
 * `jobs=a,b&x=step|time|tokens&smoothing=0.6` (or `window=n`, a mean of the last n
 * values)`&fields=k1,k2`. Anything out of range falls back to its default;
 * `fields` null means "not chosen" (the default charts).
 */
export function parseCompareState(query) {
  const params = parseParams(query);
  const x = params.get("x");
  const state = {
    jobs: parseList(query, "jobs"),
    x: X_MODES.some((mode) => mode.id === x) ? x : "step",
    smoothing: clampSmoothing(Number(params.get("smoothing") ?? 0)),
    window: null,
    fields: params.has("fields") ? parseList(query, "fields") : null,
  };
  const window = Number.parseInt(params.get("window") ?? "", 10);
  if (Number.isInteger(window) && window >= 1) {
    state.window = Math.min(window, MAX_WINDOW);
    state.smoothing = 0;
  }
  return state;
}

export function clampSmoothing(weight) {
  if (!Number.isFinite(weight) || weight <= 0) return 0;
  return Math.min(MAX_SMOOTHING, Math.round(weight * 100) / 100);
}

/** The hash of a comparison: `#/compare?jobs=a,b&x=step&smoothing=0.6[&fields=...]`. */
export function compareHash(state) {
  const query = buildQuery([
    ["jobs", state.jobs],
    ["x", state.x],
    state.window ? ["window", String(state.window)] : ["smoothing", String(state.smoothing)],
    ["fields", state.fields],
  ]);
  // Every chart removed is a choice too ("fields=" with nothing), unlike no choice.
  const noFields = state.fields !== null && !state.fields.length ? "&fields=" : "";
  return `#/compare?${query}${noFields}`;
}

/** The `GET /api/compare` (or `/api/compare/config`) query for a state. */
export function compareApiQuery(state, maxPoints) {
  const smoothing = state.window ? ["window", String(state.window)]
    : ["smoothing", state.smoothing > 0 ? String(state.smoothing) : null];
  return buildQuery([
    ["jobs", state.jobs],
    ["max_points", maxPoints === undefined ? null : String(maxPoints)],
    ["x", state.x === "step" ? null : state.x],
    smoothing,
  ]);
}

// --- Runs: colour, label -------------------------------------------------------------

/** FNV-1a, 32 bits: a cheap, stable hash of a job id. */
export function hashString(text) {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i += 1) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}

// Twenty colours that read well on white and differ from each other, the first ten
// most of all (a comparison of a few runs is the common case).
export const RUN_PALETTE = [
  "#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#a16207", "#db2777",
  "#475569", "#65a30d", "#1e3a8a", "#7f1d1d", "#14532d", "#c026d3", "#0d9488", "#f59e0b",
  "#6d28d9", "#854d0e", "#0284c7", "#be123c",
];

/** A run's own colour, from its job id alone (its slot in RUN_PALETTE by hash). */
export function runColor(jobId) {
  return RUN_PALETTE[hashString(jobId) % RUN_PALETTE.length];
}

/**
 * The colours of the runs of one comparison: each its own colour (runColor), the
 * same on every page and after a reload, except when two runs of this comparison
 * share a slot: then the one whose id sorts later takes the next free slot, so no
 * two lines look alike. Deterministic: the same runs get the same colours, in any
 * order in the URL. A Map job id → "#rrggbb" (the charts append an alpha).
 */
export function runColors(jobIds) {
  const taken = new Set();
  const colors = new Map();
  for (const jobId of [...new Set(jobIds)].sort()) {
    let slot = hashString(jobId) % RUN_PALETTE.length;
    for (let tries = 0; taken.has(slot) && tries < RUN_PALETTE.length; tries += 1) {
      slot = (slot + 1) % RUN_PALETTE.length;
    }
    taken.add(slot);
    colors.set(jobId, RUN_PALETTE[slot]);
  }
  return colors;
}

/** What a run is called on the page: its name, else its job id. */
export function runLabel(run) {
  const name = typeof run.name === "string" ? run.name.trim() : "";
  return name || run.job_id || run.jobId;
}

// --- Runs as column stores ------------------------------------------------------------

function numeric(value) {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

/**
 * One run of a `GET /api/compare` answer as a column store:
 * `{jobId, name, project, status, health, x: [], steps: [], lastSteps: [], times: [],
 *   series: Map(key → {mean, min, max, line}), smoothingExact, downsampled}`.
 * `line` is what the chart draws as the run's line: the server's `smoothed` when the
 * comparison is smoothed, else the mean. Non-finite values (strings) are gaps.
 */
export function runFromCompare(entry) {
  const n = entry.steps.length;
  const run = {
    jobId: entry.job_id,
    name: entry.name ?? null,
    project: entry.project ?? null,
    status: entry.status ?? null,
    health: entry.health ?? null,
    x: (entry.x_values || new Array(n).fill(null)).map(numeric),
    steps: entry.steps.slice(),
    lastSteps: entry.downsampled && entry.last_steps ? entry.last_steps.slice() : entry.steps.slice(),
    times: entry.timestamps ? entry.timestamps.map(numeric) : new Array(n).fill(null),
    series: new Map(),
    downsampled: Boolean(entry.downsampled),
    smoothingExact: entry.smoothing_exact !== false,
  };
  for (const [key, series] of Object.entries(entry.series || {})) {
    let mean;
    let min;
    let max;
    if (series.values) {
      mean = series.values.map(numeric);
      min = mean;
      max = mean;
    } else {
      mean = (series.mean || []).map(numeric);
      min = (series.min || []).map(numeric);
      max = (series.max || []).map(numeric);
    }
    const line = series.smoothed ? series.smoothed.map(numeric) : mean;
    run.series.set(key, { mean, min, max, line });
  }
  return run;
}

/** Every series any of the runs has, sorted: what the metric picker offers. */
export function metricUnion(runs) {
  const keys = new Set();
  for (const run of runs) for (const key of run.series.keys()) keys.add(key);
  return [...keys].sort();
}

/** The charts to draw: the chosen fields, else the usual curves the runs have. */
export function chosenFields(fields, union) {
  if (fields !== null) return fields;
  const have = new Set(union);
  const picked = DEFAULT_FIELDS.filter((key) => have.has(key)).slice(0, MAX_DEFAULT_CHARTS);
  for (const key of union) {
    if (picked.length >= MAX_DEFAULT_CHARTS) break;
    // System series are the reader's to add: they cost a second request.
    if (!picked.includes(key) && !key.startsWith("timing.") && !key.startsWith("system.")) picked.push(key);
  }
  return picked;
}

/**
 * The series `key` of several runs on one x axis, for uPlot: `xs`, the sorted union
 * of the x values where any run has a value, and per run (in order) `line`, `min`,
 * `max` aligned to it (null where that run has no point there), and `present`, the
 * indices where it has one (for the hover). A run without the series, or a point
 * whose x is unknown (null: no tokens reported), adds nothing: its line is absent.
 * Two points of one run at the same x: the later wins.
 */
export function mergeRuns(runs, key) {
  const seen = new Set();
  for (const run of runs) {
    const series = run.series.get(key);
    if (!series) continue;
    for (let i = 0; i < run.x.length; i += 1) {
      if (run.x[i] !== null && hasPoint(series, i)) seen.add(run.x[i]);
    }
  }
  const xs = [...seen].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  const perRun = runs.map((run) => {
    const line = new Array(xs.length).fill(null);
    const min = new Array(xs.length).fill(null);
    const max = new Array(xs.length).fill(null);
    const present = [];
    const series = run.series.get(key);
    if (series) {
      for (let i = 0; i < run.x.length; i += 1) {
        if (run.x[i] === null || !hasPoint(series, i)) continue;
        const j = at.get(run.x[i]);
        line[j] = series.line[i];
        min[j] = series.min[i];
        max[j] = series.max[i];
        present.push(j);
      }
    }
    return { line, min, max, present: [...new Set(present)].sort((a, b) => a - b) };
  });
  return { xs, perRun };
}

function hasPoint(series, i) {
  return series.line[i] !== null || series.mean[i] !== null
    || series.min[i] !== null || series.max[i] !== null;
}

/**
 * The point of run `r` of a merged chart nearest to `x` (its index into `xs`), or
 * null when `x` lies outside that run's own x range (a run that ended earlier shows
 * no value rather than its last one).
 */
export function nearestPoint(merged, r, x) {
  const { present } = merged.perRun[r];
  const { xs } = merged;
  if (!present.length || x === null || x === undefined || Number.isNaN(x)) return null;
  if (x < xs[present[0]] || x > xs[present[present.length - 1]]) return null;
  let lo = 0;
  let hi = present.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[present[mid]] < x) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0 && x - xs[present[lo - 1]] <= xs[present[lo]] - x) return present[lo - 1];
  return present[lo];
}

/** The last point of run `r` in a merged chart (its index into `xs`), or null. */
export function lastPoint(merged, r) {
  const { present } = merged.perRun[r];
  return present.length ? present[present.length - 1] : null;
}

// --- Live: appending records, continuing the smoothing --------------------------------

/**
 * Where a smoothed series stands, to continue it over new exact values:
 * `{last, count}` for the EMA (debiased: `count` values seen; Infinity when the
 * count is unknown, as after a downsampled answer, where the debiasing has long
 * worn off anyway), `{values}` for the window mean (its last n values).
 */
export function seedSmoothing(series, { weight, window, exactCount }) {
  if (window) {
    const values = series.mean.filter((value) => value !== null).slice(-window);
    return { values };
  }
  let last = null;
  for (let i = series.line.length - 1; i >= 0; i -= 1) {
    if (series.line[i] !== null) {
      last = series.line[i];
      break;
    }
  }
  if (!weight || last === null) return { last, count: last === null ? 0 : Infinity };
  const count = exactCount ? series.mean.filter((value) => value !== null).length : Infinity;
  return { last, count };
}

/**
 * The next smoothed value after `value` (state updated in place), or null for a
 * missing or non-finite value, which leaves the average as it was (a gap).
 * EMA: s = w*s + (1-w)*v, debiased as TensorBoard does (the server's rule).
 */
export function smoothNext(state, value, { weight, window }) {
  if (typeof value !== "number" || !Number.isFinite(value)) return null;
  if (window) {
    state.values.push(value);
    if (state.values.length > window) state.values.splice(0, state.values.length - window);
    return state.values.reduce((sum, v) => sum + v, 0) / state.values.length;
  }
  if (!weight) {
    state.last = value;
    state.count += 1;
    return value;
  }
  // Undo the debiasing of the last value, add the new one, debias again.
  const raw = state.count > 0 && state.last !== null ? state.last * (1 - weight ** state.count) : 0;
  const next = weight * raw + (1 - weight) * value;
  state.count += 1;
  state.last = next / (1 - weight ** state.count);
  return state.last;
}

/**
 * The x of a live record. `step`: its step. `time`: seconds since the run's first
 * record (`run.timeOrigin`). `tokens`: TRL's cumulative `num_tokens`, else the
 * running sum of verl's per-step `perf/total_num_tokens` (from the run's last x).
 * null when unknown (the point is then left off the chart, as the server does).
 */
export function liveX(mode, record, values, run) {
  if (mode === "step") return record.step;
  if (mode === "time") {
    if (typeof record.timestamp !== "number") return null;
    if (run.timeOrigin === null || run.timeOrigin === undefined) run.timeOrigin = record.timestamp;
    return record.timestamp - run.timeOrigin;
  }
  const cumulative = values["extra.num_tokens"];
  if (typeof cumulative === "number") return cumulative;
  const perStep = values["extra.perf/total_num_tokens"];
  if (typeof perStep !== "number") return null;
  const previous = lastKnown(run.x);
  return (previous ?? 0) + perStep;
}

function lastKnown(values) {
  for (let i = values.length - 1; i >= 0; i -= 1) if (values[i] !== null) return values[i];
  return null;
}

/**
 * The wall-clock time of a run's x = 0 in `time` mode (its first record), from
 * any point that has both a timestamp and an x; null when none has.
 */
export function timeOrigin(run) {
  for (let i = 0; i < run.x.length; i += 1) {
    if (run.x[i] !== null && run.times[i] !== null) return run.times[i] - run.x[i];
  }
  return null;
}

/**
 * Append one live record (flattened to `{"group.field": value}`) to a run as an
 * exact point, each series' line continued from `run.smoothers` (built lazily with
 * `seedSmoothing`). New series are padded with empty points first.
 */
export function appendLive(run, record, values, { mode, weight, window }) {
  const x = liveX(mode, record, values, run);
  const index = run.steps.length;
  if (!run.smoothers) run.smoothers = new Map();
  for (const key of Object.keys(values)) {
    if (!run.series.has(key)) {
      const empty = () => new Array(index).fill(null);
      const line = empty();
      run.series.set(key, { mean: empty(), min: empty(), max: empty(), line });
    }
  }
  run.x.push(x);
  run.steps.push(record.step);
  run.lastSteps.push(record.step);
  run.times.push(typeof record.timestamp === "number" ? record.timestamp : null);
  for (const [key, series] of run.series) {
    const value = numeric(values[key]);
    const smoothed = weight || window;
    if (smoothed && !run.smoothers.has(key)) {
      const seed = seedSmoothing(
        { mean: series.mean, line: series.line },
        { weight, window, exactCount: !run.downsampled && run.smoothingExact },
      );
      run.smoothers.set(key, seed);
    }
    const line = smoothed ? smoothNext(run.smoothers.get(key), value, { weight, window }) : value;
    series.mean.push(value);
    if (series.min !== series.mean) series.min.push(value);
    if (series.max !== series.mean && series.max !== series.min) series.max.push(value);
    if (series.line !== series.mean) series.line.push(line);
  }
}

/** The last step a run holds (where its live stream resumes), or null. */
export function lastStepOf(run) {
  return run.lastSteps.length ? run.lastSteps[run.lastSteps.length - 1] : null;
}

// --- The config diff ------------------------------------------------------------------

/** A config value as a table cell's text: JSON for lists and objects, "—" when missing. */
export function configCell(value) {
  if (value === null || value === undefined) return { text: "—", missing: true };
  if (typeof value === "string") return { text: value, missing: false };
  if (typeof value === "number" || typeof value === "boolean") return { text: String(value), missing: false };
  return { text: JSON.stringify(value), missing: false };
}

/**
 * The rows of the config-diff table from a `GET /api/compare/config` answer: one per
 * differing key (sorted), with a cell per job in `jobIds` order.
 */
export function configDiffRows(body, jobIds) {
  const differences = body.differences || {};
  return Object.keys(differences).sort().map((key) => ({
    key,
    cells: jobIds.map((jobId) => ({ jobId, ...configCell(differences[key][jobId]) })),
  }));
}

// --- Axis labels ------------------------------------------------------------------------

/** Seconds as a short duration: 45 s, 12m 30s, 3h 05m, 2d 4h. */
export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  const sign = seconds < 0 ? "-" : "";
  let s = Math.abs(seconds);
  if (s === 0) return "0 s";
  if (s < 1) return `${sign}${Math.round(s * 1000)} ms`;
  if (s < 60) return `${sign}${Number.isInteger(s) ? s : s.toFixed(1)} s`;
  s = Math.round(s);
  const pad = (n) => String(n).padStart(2, "0");
  if (s < 3600) return `${sign}${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86_400) return `${sign}${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
  return `${sign}${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3600)}h`;
}

/** A count with an SI suffix: 950, 12.5k, 3.2M, 1.05B. */
export function fmtCount(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  const abs = Math.abs(value);
  const units = [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "k"]];
  for (const [size, suffix] of units) {
    if (abs >= size) return `${Number((value / size).toPrecision(3))}${suffix}`;
  }
  return String(Math.round(value * 100) / 100);
}
