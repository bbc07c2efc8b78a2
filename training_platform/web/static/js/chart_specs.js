// Which charts a run view shows, and from which series.
//
// A line chart names series keys ("group.field"); `pick` charts show the first key
// present (trainers name entropy differently); `stackPrefix` stacks every series
// under a prefix (the per-stage timing breakdown).

export const PALETTE = [
  "#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2",
  "#ca8a04", "#db2777", "#4b5563", "#65a30d", "#7c3aed", "#0d9488",
];

// The same preference order as callbacks/wire.py's ENTROPY_KEYS.
const ENTROPY = ["actor/entropy", "entropy", "policy/entropy_avg", "objective/entropy",
  "policy/entropy"].map((key) => `extra.${key}`);

export const SECTIONS = [
  { id: "overview", title: "Overview" },
  { id: "performance", title: "Performance and memory" },
  { id: "timing", title: "Timing" },
  { id: "custom", title: "More metrics" },
];

export const CHARTS = [
  {
    id: "losses", section: "overview", title: "Losses",
    lines: [
      { key: "loss.actor_loss", label: "actor" },
      { key: "loss.critic_loss", label: "critic" },
      { key: "loss.total_loss", label: "total" },
    ],
  },
  {
    id: "reward", section: "overview", title: "Reward (mean, min–max band)",
    lines: [{ key: "reward.mean", label: "mean" }],
    band: { lower: "reward.min", upper: "reward.max", label: "min–max" },
  },
  {
    id: "kl", section: "overview", title: "KL divergence",
    lines: [{ key: "kl.mean", label: "mean" }, { key: "kl.max", label: "max" }],
  },
  {
    id: "grad", section: "overview", title: "Gradient norms",
    lines: [
      { key: "gradient.actor_norm", label: "actor" },
      { key: "gradient.critic_norm", label: "critic" },
    ],
  },
  { id: "entropy", section: "overview", title: "Entropy", pick: ENTROPY, label: "entropy" },
  {
    id: "throughput", section: "performance", title: "Throughput (tokens/s)",
    lines: [{ key: "performance.tokens_per_second", label: "tokens/s" }],
  },
  {
    id: "step_time", section: "performance", title: "Step time (s)",
    lines: [{ key: "performance.step_time", label: "step time" }],
  },
  {
    id: "gpu_memory", section: "performance", title: "GPU memory allocated (GiB)",
    lines: [{ key: "performance.gpu_memory_allocated", label: "GiB" }],
  },
  { id: "timing", section: "timing", title: "Per-stage time (s, stacked)", stackPrefix: "timing." },
];

/** Keys the fixed charts show (a `pick` chart claims all its candidates). */
export function claimedKeys(spec) {
  const keys = [];
  for (const line of spec.lines || []) keys.push(line.key);
  if (spec.band) keys.push(spec.band.lower, spec.band.upper);
  if (spec.pick) keys.push(...spec.pick);
  return keys;
}

// --- Series names as a reader reads them --------------------------------------------

// The record's groups (docs/contract.md) in the order the picker lists them; any
// other group (a trainer's own) comes after these, by name.
export const GROUP_TITLES = {
  loss: "Loss", reward: "Reward", kl: "KL", gradient: "Gradient",
  performance: "Performance", timing: "Timing", extra: "Extra", system: "System",
};

// The Compare view's run-level system series (history/compare_system.py): what each is.
const SYSTEM_TITLES = {
  "system.gpu_utilization": "GPU utilization (%, mean of all GPUs)",
  "system.gpu_memory_used_gib": "GPU memory used (GiB, fullest GPU)",
  "system.gpu_power_w": "GPU power (W, all GPUs)",
  "system.gpu_temperature_c": "GPU temperature (°C, hottest GPU)",
  "system.cpu_percent": "CPU (%, all hosts)",
  "system.memory_used_gib": "Memory used (GiB, all hosts)",
  "system.disk_used_percent": "Disk used (%, fullest host)",
  "system.network_recv_mib_s": "Network received (MiB/s, all hosts)",
  "system.network_sent_mib_s": "Network sent (MiB/s, all hosts)",
};

/** The group of a series key: what comes before its first dot ("" when none). */
export function groupOf(key) {
  const dot = key.indexOf(".");
  return dot < 0 ? "" : key.slice(0, dot);
}

export function groupTitle(group) {
  return GROUP_TITLES[group] ?? (group || "Other");
}

/**
 * A series key as a chart title: the fixed chart's own title where one chart shows
 * just this series ("Step time (s)"), else its group and field in words
 * ("reward.mean" → "Reward: mean", "loss.actor_loss" → "Loss: actor loss");
 * `extra.*` fields are named by the trainer already ("actor/entropy").
 */
export function seriesTitle(key) {
  const fixed = CHARTS.find((spec) => (spec.pick ? spec.pick.includes(key)
    : spec.lines && spec.lines.length === 1 && !spec.band && spec.lines[0].key === key));
  if (fixed) return fixed.title;
  if (SYSTEM_TITLES[key]) return SYSTEM_TITLES[key];
  const group = groupOf(key);
  if (!group) return key;
  const field = key.slice(group.length + 1).replace(/_/g, " ");
  return group === "extra" ? field : `${groupTitle(group)}: ${field}`;
}

/** A chart spec for one series the user added ("any extra metric can be a chart"). */
export function customSpec(key) {
  return {
    id: `custom:${key}`, section: "custom", title: seriesTitle(key), key, custom: true,
    lines: [{ key, label: key.split(".").slice(1).join(".") || key }],
  };
}

/** Lines of `spec` for the keys present in `keys` (a Set), with their colours. */
export function resolveLines(spec, keys) {
  let lines;
  if (spec.pick) {
    const key = spec.pick.find((candidate) => keys.has(candidate));
    lines = key ? [{ key, label: spec.label }] : [];
  } else if (spec.stackPrefix) {
    // Nested stages (`update/actor`) are inside their parent's time: stacking them too
    // would count them twice.
    lines = [...keys].filter((key) => key.startsWith(spec.stackPrefix)
      && !key.slice(spec.stackPrefix.length).includes("/")).sort()
      .map((key) => ({ key, label: key.slice(spec.stackPrefix.length) }));
  } else {
    lines = spec.lines.filter((line) => keys.has(line.key));
  }
  return lines.map((line, i) => ({ ...line, color: PALETTE[i % PALETTE.length] }));
}

// The reader's chart preferences, remembered in localStorage across runs: which
// charts (by id) use a log y axis, and the board's x axis.
const LOG_CHARTS_KEY = "training_platform.log_charts";
const X_AXIS_KEY = "training_platform.x_axis";
export const X_AXES = [
  { id: "step", label: "step" },
  { id: "time", label: "wall-clock time" },
];

function storedLogCharts() {
  try {
    const ids = JSON.parse(localStorage.getItem(LOG_CHARTS_KEY) || "[]");
    return new Set(Array.isArray(ids) ? ids.filter((id) => typeof id === "string") : []);
  } catch {
    return new Set(); // a hand-edited or foreign value: start again
  }
}

export function logScaleWanted(chartId) {
  return storedLogCharts().has(chartId);
}

export function setLogScaleWanted(chartId, on) {
  const ids = storedLogCharts();
  if (on) ids.add(chartId);
  else ids.delete(chartId);
  localStorage.setItem(LOG_CHARTS_KEY, JSON.stringify([...ids].sort()));
}

export function savedXAxis() {
  const wanted = localStorage.getItem(X_AXIS_KEY);
  return X_AXES.some((axis) => axis.id === wanted) ? wanted : "step";
}

export function saveXAxis(axis) {
  localStorage.setItem(X_AXIS_KEY, axis);
}
