// The Samples panel's pure parts (no DOM, no fetch): query strings from the filter
// state, cell texts, the step list and which step a chart click lands on.
// Unit-tested under Node (tests/samples_logic.test.js).

import { NONFINITE, fmtNumber, fmtStep } from "./format.js";

export const SORTS = [
  { id: "step", label: "step, index" },
  { id: "reward", label: "reward" },
  { id: "length", label: "length" },
];
export const PAGE_SIZE = 100;
export const PROMPT_PAGE_SIZE = 200;

/** The panel's filters as the user left them: every field a string from its input. */
export function defaultFilters() {
  return {
    scope: "step", // "step": the chosen step only; "run": every step
    group: "",
    finishReason: "",
    minReward: "",
    maxReward: "",
    q: "",
    sort: "step",
    order: "asc",
  };
}

/** A number typed into an input, or null when empty or not a number. */
export function parseBound(text) {
  if (text === null || text === undefined) return null;
  const trimmed = String(text).trim();
  if (!trimmed) return null;
  const value = Number(trimmed);
  return Number.isFinite(value) ? value : null;
}

/**
 * The query string (without "?") of GET /samples for `filters` at `step`
 * (ignored with scope "run"), from `cursor` when paging on.
 */
export function samplesQuery(filters, { step = null, cursor = null, limit = PAGE_SIZE } = {}) {
  const params = new URLSearchParams();
  if (filters.scope !== "run" && step !== null && step !== undefined) params.set("step", String(step));
  const group = (filters.group || "").trim();
  if (group) params.set("group", group);
  const finish = (filters.finishReason || "").trim();
  if (finish) params.set("finish_reason", finish);
  const min = parseBound(filters.minReward);
  if (min !== null) params.set("min_reward", String(min));
  const max = parseBound(filters.maxReward);
  if (max !== null) params.set("max_reward", String(max));
  const q = (filters.q || "").trim();
  if (q) params.set("q", q);
  params.set("sort", SORTS.some((s) => s.id === filters.sort) ? filters.sort : "step");
  params.set("order", filters.order === "desc" ? "desc" : "asc");
  params.set("limit", String(limit));
  if (cursor) params.set("cursor", cursor);
  return params.toString();
}

/** GET /samples for one prompt (by digest) across the whole run, in step order. */
export function promptQuery(digest, { cursor = null, limit = PROMPT_PAGE_SIZE } = {}) {
  const params = new URLSearchParams({ prompt: digest, sort: "step", order: "asc", limit: String(limit) });
  if (cursor) params.set("cursor", cursor);
  return params.toString();
}

/** GET /samples/steps for a range (either end open). */
export function stepsQuery({ startStep = null, endStep = null, limit = null } = {}) {
  const params = new URLSearchParams();
  if (startStep !== null && startStep !== undefined) params.set("start_step", String(startStep));
  if (endStep !== null && endStep !== undefined) params.set("end_step", String(endStep));
  if (limit) params.set("limit", String(limit));
  return params.toString();
}

/** Whether any filter narrows the rows (sorting does not). */
export function filtersActive(filters) {
  return Boolean((filters.group || "").trim() || (filters.finishReason || "").trim()
    || parseBound(filters.minReward) !== null || parseBound(filters.maxReward) !== null
    || (filters.q || "").trim());
}

/**
 * A reward (or a component) as its table cell: `text`, `nonfinite` (the API's
 * "NaN"/"Infinity"/"-Infinity", shown as such and in red), `missing` (null).
 */
export function rewardCell(value) {
  if (value === null || value === undefined) return { text: "–", nonfinite: false, missing: true };
  if (typeof value === "string") {
    return { text: value, nonfinite: NONFINITE.has(value), missing: false };
  }
  if (typeof value === "number" && !Number.isFinite(value)) {
    return { text: String(value), nonfinite: true, missing: false };
  }
  return { text: fmtNumber(value), nonfinite: false, missing: false };
}

/** A sample's reward components, in their logged order, each as a reward cell. */
export function componentCells(rewards) {
  if (!rewards || typeof rewards !== "object") return [];
  return Object.entries(rewards).map(([name, value]) => ({ name, ...rewardCell(value) }));
}

/** The one-line preview of a text: whitespace runs as one space, cut at `max` characters. */
export function previewLine(text, max = 160) {
  const flat = String(text ?? "").replace(/\s+/g, " ").trim();
  if (flat.length <= max) return flat;
  return `${flat.slice(0, max - 1)}…`;
}

/** What the step slider says next to a step: its count, mean reward and truncated count. */
export function describeStep(stat) {
  if (!stat) return "";
  const parts = [`${fmtStep(stat.count)} sample${stat.count === 1 ? "" : "s"}`];
  if (stat.reward_mean !== null && stat.reward_mean !== undefined) {
    parts.push(`mean reward ${rewardCell(stat.reward_mean).text}`);
  }
  if (stat.truncated !== null && stat.truncated !== undefined) parts.push(`${fmtStep(stat.truncated)} truncated`);
  return parts.join(" · ");
}

/** Index of `step` in the ascending `steps`, or -1. */
export function indexOfStep(steps, step) {
  let lo = 0;
  let hi = steps.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (steps[mid] === step) return mid;
    if (steps[mid] < step) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/**
 * The step with samples nearest to `target` in the ascending `steps` (null when
 * there are none). Halfway between two, the earlier one: the samples a step was
 * trained on come from its own rollout, so the earlier step is the one whose
 * completions led up to what the chart shows at `target`.
 */
export function nearestStep(steps, target) {
  if (!steps.length || target === null || target === undefined || Number.isNaN(target)) return null;
  let lo = 0;
  let hi = steps.length; // first index whose step >= target
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (steps[mid] < target) lo = mid + 1;
    else hi = mid;
  }
  if (lo === steps.length) return steps[steps.length - 1];
  if (steps[lo] === target || lo === 0) return steps[lo];
  const before = steps[lo - 1];
  const after = steps[lo];
  return target - before <= after - target ? before : after;
}

/** `list` (step stats, ascending) with `fresh` ones added or replacing theirs, ascending. */
export function mergeStepStats(list, fresh) {
  const byStep = new Map(list.map((stat) => [stat.step, stat]));
  for (const stat of fresh) byStep.set(stat.step, stat);
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}

/** Samples (any order) grouped by step, ascending; within a step by index. */
export function groupByStep(samples) {
  const byStep = new Map();
  for (const sample of samples) {
    if (!byStep.has(sample.step)) byStep.set(sample.step, []);
    byStep.get(sample.step).push(sample);
  }
  return [...byStep.entries()].sort((a, b) => a[0] - b[0])
    .map(([step, rows]) => ({ step, samples: rows.sort((a, b) => a.index - b.index) }));
}

/** Whether an anomaly (or incident) was found by the platform's sample detectors. */
export function isSamplesAnomaly(anomaly) {
  if (!anomaly) return false;
  if (anomaly.source === "samples") return true;
  return Array.isArray(anomaly.sources) && anomaly.sources.includes("samples");
}

/** The finish reasons to offer: the usual two, then any others seen, in order. */
export function finishReasonOptions(seen) {
  const options = ["stop", "length"];
  for (const reason of seen) if (reason && !options.includes(reason)) options.push(reason);
  return options;
}

/** A sample's length cell: tokens when logged, else characters (said in `unit`). */
export function lengthCell(sample) {
  if (sample.response_length !== null && sample.response_length !== undefined) {
    return { text: fmtStep(sample.response_length), unit: "tokens" };
  }
  if (sample.length !== null && sample.length !== undefined) {
    return { text: fmtStep(sample.length), unit: "characters" };
  }
  return { text: "–", unit: null };
}

/** The step a chart point stands for: the step itself, or for a bucket the step under the cursor. */
export function stepOfPoint(firstStep, lastStep, cursorStep) {
  if (firstStep === lastStep || cursorStep === null || cursorStep === undefined || Number.isNaN(cursorStep)) {
    return firstStep;
  }
  return Math.min(lastStep, Math.max(firstStep, Math.round(cursorStep)));
}
