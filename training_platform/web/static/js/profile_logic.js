// The profiling views' pure parts (no DOM): tabs from the URL, the stage table and the
// slowest steps from a run's columns, memory reference lines, and the op table
// (CSV parsing, sorting, filtering). Unit-tested in tests/profile_logic.test.js.

export const TABS = [
  { id: "", label: "Overview" },
  { id: "timing", label: "Timing" },
  { id: "memory", label: "Memory" },
  { id: "artifacts", label: "Artifacts" },
  { id: "system", label: "System" }, // system_view.js: the hosts' GPU, CPU, memory, disk, network
];

/** The run view's tab in a hash like `#/run/{job}/timing` ("" for the overview). */
export function tabOfHash(hash) {
  const tab = hash.replace(/^#/, "").split("/")[3] || "";
  return TABS.some((t) => t.id === tab) ? tab : "";
}

function percentileOf(sorted, q) {
  if (!sorted.length) return null;
  const position = (sorted.length - 1) * q / 100;
  const low = Math.floor(position);
  const high = Math.min(low + 1, sorted.length - 1);
  return sorted[low] + (sorted[high] - sorted[low]) * (position - low);
}

function finite(values) {
  return values.filter((v) => typeof v === "number" && Number.isFinite(v));
}

/**
 * Per stage (top level and nested `parent/child`), from the `timing.*` series the
 * view holds: mean, p50, p95 over its points, and its share of the step time.
 * Downsampled buckets count as one point each (their mean).
 */
export function stageTableFromColumns(columns) {
  const stepCol = columns.cols.get("performance.step_time");
  const stepTotal = stepCol ? finite(stepCol.mean).reduce((a, b) => a + b, 0) : 0;
  const rows = [];
  let topTotal = 0;
  for (const key of columns.keys()) {
    if (!key.startsWith("timing.")) continue;
    const stage = key.slice(7);
    const values = finite(columns.cols.get(key).mean);
    if (!values.length) continue;
    const total = values.reduce((a, b) => a + b, 0);
    if (!stage.includes("/")) topTotal += total;
    const sorted = [...values].sort((a, b) => a - b);
    rows.push({
      stage, depth: stage.split("/").length - 1, count: values.length,
      mean: total / values.length, p50: percentileOf(sorted, 50), p95: percentileOf(sorted, 95), total,
    });
  }
  const denominator = stepTotal || topTotal;
  for (const row of rows) row.share = denominator ? row.total / denominator : null;
  return sortStageTree(rows);
}

/** Parents before their children; siblings by total time, largest first. */
export function sortStageTree(rows) {
  const totals = new Map(rows.map((row) => [row.stage, row.total]));
  const key = (stage) => {
    const parts = stage.split("/");
    return parts.map((_, i) => parts.slice(0, i + 1).join("/"));
  };
  return [...rows].sort((a, b) => {
    const ka = key(a.stage);
    const kb = key(b.stage);
    for (let i = 0; i < Math.min(ka.length, kb.length); i += 1) {
      if (ka[i] !== kb[i]) {
        const diff = (totals.get(kb[i]) ?? 0) - (totals.get(ka[i]) ?? 0);
        return diff || (ka[i] < kb[i] ? -1 : 1);
      }
    }
    return ka.length - kb.length;
  });
}

/**
 * The `limit` slowest points by step time (a bucket's maximum), slowest first, each
 * with its top-level stages at that point: `{step, lastStep, seconds, stages}`.
 */
export function slowestSteps(columns, limit = 10) {
  const stepCol = columns.cols.get("performance.step_time");
  if (!stepCol) return [];
  const stageKeys = columns.keys().filter((k) => k.startsWith("timing.") && !k.slice(7).includes("/"));
  const found = [];
  for (let i = 0; i < columns.length; i += 1) {
    const seconds = stepCol.max[i] ?? stepCol.mean[i];
    if (typeof seconds !== "number" || !Number.isFinite(seconds)) continue;
    found.push({ i, seconds });
  }
  found.sort((a, b) => b.seconds - a.seconds || a.i - b.i);
  return found.slice(0, limit).map(({ i, seconds }) => ({
    step: columns.steps[i],
    lastStep: columns.lastSteps[i],
    seconds,
    stages: Object.fromEntries(stageKeys
      .map((k) => [k.slice(7), columns.cols.get(k).mean[i]])
      .filter(([, v]) => typeof v === "number")),
  }));
}

/** Memory series the Memory view draws: `extra.profiling/...` keys by device. */
export function memoryKeys(keys) {
  const gpu = keys.filter((k) => /^extra\.profiling\/cuda\d+\/(allocated|reserved|peak)_gib$/.test(k)).sort();
  const host = keys.filter((k) => k === "extra.profiling/rss_gib");
  return { gpu, host };
}

/**
 * `columns` with the report's reference lines added as series: per memory figure
 * with a baseline, `ref.<name>_baseline` (flat); per fitted trend, `ref.<name>_trend`
 * (the least-squares line over its steps, empty elsewhere). Names: `rss`, `cuda0`.
 */
export function withReferenceLines(columns, memory) {
  const out = Object.assign(Object.create(Object.getPrototypeOf(columns)), columns);
  out.cols = new Map(columns.cols);
  if (!memory || !columns.length) return out;
  const put = (key, valueAt) => {
    const values = columns.steps.map((step) => valueAt(step));
    out.cols.set(key, { mean: values, min: values, max: values, nf: values.map(() => 0) });
  };
  const baseline = memory.baseline || {};
  for (const [device, figures] of Object.entries(baseline)) {
    if (device === "rss_gib" && typeof figures === "number") put("ref.rss_baseline", () => figures);
    const match = /^cuda:(\d+)$/.exec(device);
    if (match && figures && typeof figures.allocated_gib === "number") {
      put(`ref.cuda${match[1]}_baseline`, () => figures.allocated_gib);
    }
  }
  for (const [name, fit] of Object.entries(memory.trend || {})) {
    const key = name === "rss_gib" ? "ref.rss_trend" : `ref.${name.replace(/^cuda:(\d+)\/allocated_gib$/, "cuda$1")}_trend`;
    if (!fit || !(fit.to_step > fit.from_step)) continue;
    const slope = (fit.to_gib - fit.from_gib) / (fit.to_step - fit.from_step);
    put(key, (step) => (step >= fit.from_step && step <= fit.to_step ? fit.from_gib + slope * (step - fit.from_step) : null));
  }
  return out;
}

/** RFC 4180 CSV: quoted fields, doubled quotes, CRLF or LF. Returns rows of strings. */
export function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = "";
  let quoted = false;
  const body = text.startsWith("\ufeff") ? text.slice(1) : text;
  for (let i = 0; i < body.length; i += 1) {
    const c = body[i];
    if (quoted) {
      if (c === '"' && body[i + 1] === '"') { field += '"'; i += 1; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(field); field = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && body[i + 1] === "\n") i += 1;
      row.push(field);
      rows.push(row);
      row = [];
      field = "";
    } else field += c;
  }
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  return rows.filter((r) => r.length > 1 || r[0] !== "");
}

/** op_stats.csv as `{columns, rows}`, numbers parsed (a cell that is not one stays text). */
export function opTable(text) {
  const [header = [], ...lines] = parseCsv(text);
  const rows = lines.map((cells) => Object.fromEntries(header.map((name, i) => {
    const cell = cells[i] ?? "";
    const number = Number(cell);
    return [name, name === "op_name" || cell === "" || Number.isNaN(number) ? cell : number];
  })));
  return { columns: header, rows };
}

/** Rows whose op name holds `filter` (case-insensitive), sorted by `column`. */
export function viewOps(rows, { filter = "", column = "self_time_ms", descending = true } = {}) {
  const needle = filter.trim().toLowerCase();
  const kept = needle ? rows.filter((row) => String(row.op_name).toLowerCase().includes(needle)) : [...rows];
  const sign = descending ? -1 : 1;
  return kept.sort((a, b) => {
    const x = a[column];
    const y = b[column];
    if (typeof x === "number" && typeof y === "number") return sign * (x - y);
    return sign * String(x).localeCompare(String(y));
  });
}
