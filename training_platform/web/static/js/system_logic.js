// The System tab's pure parts (no DOM): a host's answer of
// GET /api/monitoring/{job}/system as a column store, which charts draw which series
// (one line per GPU), live samples merged in (bounded), and the run's stage timing
// as a stack on the same wall-clock axis. Unit-tested in tests/system_logic.test.js.
//
// A store: {downsampled, times: [unix s], steps: [step | null], cols: Map(series →
// {min: [], max: []})}. An exact sample has min === max; a bucket of a downsampled
// answer has its min and max (the chart draws the band between them).

import { PALETTE } from "./chart_specs.js";
import { fmtClock, fmtNumber, fmtStep } from "./format.js";
import { wallClock } from "./series.js";

/** Points of the selected host kept while live samples arrive (the oldest go first). */
export const LIVE_LIMIT = 5000;

/**
 * The charts, in order. `gpu`: one line per GPU of `gpus.{i}.<gpu>`; `gpuRef`: its
 * reference (a total, a limit), drawn dashed, once when every GPU has the same.
 * `lines`: named series; `refs`: dashed references (`scale` multiplies: 100 × cores).
 */
export const SYSTEM_CHARTS = [
  { id: "sys-gpu-util", title: "GPU utilisation (%)", gpu: "utilization" },
  { id: "sys-gpu-memory", title: "GPU memory used (GiB)", gpu: "memory_used_gib", gpuRef: "memory_total_gib", refLabel: "total" },
  { id: "sys-gpu-power", title: "GPU power (W)", gpu: "power_w", gpuRef: "power_limit_w", refLabel: "limit" },
  { id: "sys-gpu-temp", title: "GPU temperature (°C)", gpu: "temperature_c" },
  {
    id: "sys-cpu", title: "CPU (%, 100 per busy core)",
    lines: [{ key: "cpu.percent", label: "CPU" }], refs: [{ key: "cpu.count", label: "all cores", scale: 100 }],
  },
  {
    id: "sys-memory", title: "Host memory (GiB)",
    lines: [{ key: "memory.used_gib", label: "used" }], refs: [{ key: "memory.total_gib", label: "total" }],
  },
  { id: "sys-disk", title: "Disk used (%)", lines: [{ key: "disk.used_percent", label: "used" }] },
  {
    id: "sys-disk-io", title: "Disk I/O (MiB/s)",
    lines: [{ key: "disk.read_mib_s", label: "read" }, { key: "disk.write_mib_s", label: "write" }],
  },
  {
    id: "sys-network", title: "Network (MiB/s)",
    lines: [{ key: "network.recv_mib_s", label: "recv" }, { key: "network.sent_mib_s", label: "sent" }],
  },
];

export function emptyStore() {
  return { downsampled: false, times: [], steps: [], cols: new Map() };
}

/** One host's part of the answer (`body.hosts[host]`) as a store; an absent host: empty. */
export function storeFromAnswer(hostAnswer) {
  const store = emptyStore();
  if (!hostAnswer) return store;
  store.downsampled = Boolean(hostAnswer.downsampled);
  store.times = hostAnswer.timestamps.slice();
  store.steps = hostAnswer.steps.slice();
  for (const [key, series] of Object.entries(hostAnswer.series || {})) {
    if (series.values) store.cols.set(key, { min: series.values.slice(), max: series.values.slice() });
    else store.cols.set(key, { min: series.min.slice(), max: series.max.slice() });
  }
  return store;
}

/** The host to show: the one asked for when the job has it, else the first. */
export function pickHost(allHosts, wanted) {
  if (!allHosts || !allHosts.length) return null;
  return allHosts.includes(wanted) ? wanted : allHosts[0];
}

/** The GPU indices in a store's series (`gpus.{i}.…`), ascending. */
export function gpuIndices(keys) {
  const found = new Set();
  for (const key of keys) {
    const match = /^gpus\.(\d+)\./.exec(key);
    if (match) found.add(Number(match[1]));
  }
  return [...found].sort((a, b) => a - b);
}

/** Whether a column holds any value. */
function holds(store, key) {
  const column = store.cols.get(key);
  return Boolean(column) && column.max.some((v) => v !== null && v !== undefined);
}

function lastValue(store, key) {
  const column = store.cols.get(key);
  if (!column) return null;
  for (let i = column.max.length - 1; i >= 0; i -= 1) if (column.max[i] !== null) return column.max[i];
  return null;
}

/**
 * The lines a chart draws from `store`: [{key, label, color, ref, scale}], lines
 * first (a colour each), then the dashed references. Empty: the chart has nothing.
 */
export function chartLines(spec, store) {
  const lines = [];
  const refs = [];
  if (spec.gpu) {
    const gpus = gpuIndices(store.cols.keys());
    for (const i of gpus) {
      const key = `gpus.${i}.${spec.gpu}`;
      if (holds(store, key)) lines.push({ key, label: `GPU ${i}` });
    }
    if (spec.gpuRef && lines.length) {
      const keys = gpus.map((i) => `gpus.${i}.${spec.gpuRef}`).filter((key) => holds(store, key));
      const distinct = new Set(keys.map((key) => lastValue(store, key)));
      if (distinct.size === 1) refs.push({ key: keys[0], label: spec.refLabel });
      else for (const key of keys) refs.push({ key, label: `GPU ${key.split(".")[1]} ${spec.refLabel}` });
    }
  } else {
    for (const line of spec.lines) if (holds(store, line.key)) lines.push({ ...line });
    if (lines.length) for (const ref of spec.refs || []) if (holds(store, ref.key)) refs.push({ ...ref });
  }
  return [
    ...lines.map((line, i) => ({ ...line, color: PALETTE[i % PALETTE.length], ref: false, scale: 1 })),
    ...refs.map((ref) => ({ scale: 1, ...ref, color: "#64748b", ref: true })),
  ];
}

const scaled = (values, scale) => (scale === 1 ? values : values.map((v) => (v === null ? null : v * scale)));

/**
 * uPlot's data for `lines` of `store`: [times, ...per line]. Exact: one series a
 * line. Downsampled: two a line (its min, then its max) for a band between them;
 * a reference is one series (its max) either way.
 */
export function chartData(store, lines) {
  const data = [store.times];
  for (const line of lines) {
    const column = store.cols.get(line.key);
    if (store.downsampled && !line.ref) data.push(scaled(column.min, line.scale), scaled(column.max, line.scale));
    else data.push(scaled(column.max, line.scale));
  }
  return data;
}

/**
 * Append a live sample ({timestamp, step, values}) to `store`; false when it is not
 * newer than the last point held (already in the history). Series new to the store
 * are padded; past `limit` points the oldest are dropped.
 */
export function appendSample(store, sample, limit = LIVE_LIMIT) {
  const n = store.times.length;
  if (typeof sample.timestamp !== "number" || (n && sample.timestamp <= store.times[n - 1])) return false;
  const values = sample.values || {};
  for (const key of Object.keys(values)) {
    if (!store.cols.has(key)) store.cols.set(key, { min: new Array(n).fill(null), max: new Array(n).fill(null) });
  }
  store.times.push(sample.timestamp);
  store.steps.push(sample.step ?? null);
  for (const [key, column] of store.cols) {
    const value = typeof values[key] === "number" ? values[key] : null;
    column.min.push(value);
    column.max.push(value);
  }
  const extra = store.times.length - limit;
  if (extra > 0) {
    store.times.splice(0, extra);
    store.steps.splice(0, extra);
    for (const column of store.cols.values()) {
      column.min.splice(0, extra);
      column.max.splice(0, extra);
    }
  }
  return true;
}

/** The legend's place of point `i`: "12:03:04 · step 41" (a bucket: its newest step). */
export function pointPlace(store, i) {
  const span = store.times.length > 1 ? store.times[store.times.length - 1] - store.times[0] : 0;
  const time = fmtClock(store.times[i], Math.min(span, 599));
  const step = store.steps[i];
  const where = step === null || step === undefined ? "no step yet" : `step ${fmtStep(step)}`;
  return `${time} · ${where}${store.downsampled ? " (bucket)" : ""}`;
}

/** A line's value at point `i` as the legend writes it ("93 %", "10 … 95"). */
export function pointValue(store, line, i) {
  const column = store.cols.get(line.key);
  if (!column) return "–";
  const low = column.min[i] === null ? null : column.min[i] * line.scale;
  const high = column.max[i] === null ? null : column.max[i] * line.scale;
  if (low === high || line.ref) return fmtNumber(high);
  return `${fmtNumber(low)} … ${fmtNumber(high)}`;
}

/** What throttled a GPU at point `i`: ["GPU 1 thermal", ...] (either bound of a bucket). */
export function throttlesAt(store, i) {
  const out = [];
  for (const gpu of gpuIndices(store.cols.keys())) {
    for (const kind of ["thermal", "power"]) {
      const column = store.cols.get(`gpus.${gpu}.throttle_${kind}`);
      if (column && column.max[i]) out.push(`GPU ${gpu} ${kind}`);
    }
  }
  return out;
}

/**
 * The run's stage timing (its `timing.*` series, top-level stages only) as a store on
 * the wall-clock axis, and its lines stacked: the top of each stage is the sum of the
 * stages before it and itself, so the stack's height is the step's time.
 * Null when the run records no stage timing or no timestamps.
 */
export function timingStack(columns) {
  if (!columns || !columns.length) return null;
  const keys = columns.keys().filter((key) => key.startsWith("timing.") && !key.slice(7).includes("/")).sort();
  const times = wallClock(columns);
  if (!keys.length || !times) return null;
  const store = { downsampled: false, times, steps: columns.lastSteps.slice(), cols: new Map() };
  const lines = [];
  let below = new Array(columns.length).fill(0);
  keys.forEach((key, index) => {
    const mean = columns.cols.get(key).mean;
    store.cols.set(key, { min: mean, max: mean });
    const top = mean.map((value, i) => below[i] + (value ?? 0));
    lines.push({ key, label: key.slice(7), color: PALETTE[index % PALETTE.length], top });
    below = top;
  });
  return { store, lines };
}

/** [min, max] of the times of every store given (null: none has a point). */
export function timeExtent(...stores) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const store of stores) {
    if (!store || !store.times.length) continue;
    lo = Math.min(lo, store.times[0]);
    hi = Math.max(hi, store.times[store.times.length - 1]);
  }
  if (lo === Infinity) return null;
  return [lo, hi > lo ? hi : lo + 1];
}
