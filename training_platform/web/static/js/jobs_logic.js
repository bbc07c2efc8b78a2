// The pure parts of the jobs list (jobs_view.js): its filters and selection in the
// URL (`#/?q=grpo&status=running&tag=baseline&sel=a,b`), the `GET /api/jobs` query
// they make, runs grouped by project, the selection capped at what a comparison
// holds, tags typed as text, and what a PATCH of a run's name, tags and notes sends.
// No DOM here: unit-tested under Node (tests/jobs_logic.test.js).

import { MAX_RUNS } from "./compare_logic.js";
import { buildQuery, parseList, parseParams } from "./url_state.js";

export const STATUSES = ["pending", "running", "completed", "failed", "stopped", "stalled"];
export const HEALTHS = ["ok", "warning", "critical"];

/** The filters and selection of the jobs list, from its hash query. */
export function parseJobsState(query) {
  const params = parseParams(query);
  const health = params.get("health") ?? "";
  return {
    q: (params.get("q") ?? "").trim().slice(0, 256),
    status: parseList(query, "status").filter((s) => STATUSES.includes(s)),
    health: HEALTHS.includes(health) ? health : "",
    tags: parseList(query, "tag"),
    project: params.get("project") ?? "",
    selected: parseList(query, "sel").slice(0, MAX_RUNS),
  };
}

/** The jobs list's hash for a state: `#/` when nothing is filtered or selected. */
export function jobsHash(state) {
  const query = buildQuery([
    ["q", state.q], ["status", state.status], ["health", state.health],
    ["tag", state.tags], ["project", state.project], ["sel", state.selected],
  ]);
  return query ? `#/?${query}` : "#/";
}

/** Whether any filter (not the selection) is set. */
export function filtersActive(state) {
  return Boolean(state.q || state.status.length || state.health || state.tags.length || state.project);
}

/**
 * The filter part of a `GET /api/jobs` query (docs/contract.md): `status` and `tag`
 * repeated (any of the statuses; every one of the tags), `health`, `project`, `q`.
 */
export function jobsApiFilters(state) {
  const params = new URLSearchParams();
  if (state.q) params.append("q", state.q);
  for (const status of state.status) params.append("status", status);
  if (state.health) params.append("health", state.health);
  for (const tag of state.tags) params.append("tag", tag);
  if (state.project) params.append("project", state.project);
  return params.toString();
}

/**
 * Runs grouped by project, in the order they came (most recently updated first)
 * within a group; groups by name (case-insensitive), runs without a project last.
 * [{project: string | null, jobs: [...]}]
 */
export function groupByProject(jobs) {
  const groups = new Map();
  for (const job of jobs) {
    const project = typeof job.project === "string" && job.project ? job.project : null;
    if (!groups.has(project)) groups.set(project, []);
    groups.get(project).push(job);
  }
  return [...groups.entries()]
    .sort(([a], [b]) => {
      if (a === null) return b === null ? 0 : 1;
      if (b === null) return -1;
      return a.localeCompare(b, "en", { sensitivity: "base" }) || a.localeCompare(b);
    })
    .map(([project, members]) => ({ project, jobs: members }));
}

/**
 * The selection with `jobId` switched. Adding past `max` is refused: the selection
 * comes back unchanged with `refused` true (the view says why).
 */
export function toggleSelection(selected, jobId, max = MAX_RUNS) {
  if (selected.includes(jobId)) return { selected: selected.filter((id) => id !== jobId), refused: false };
  if (selected.length >= max) return { selected, refused: true };
  return { selected: [...selected, jobId], refused: false };
}

/** Tags as typed ("grpo, baseline ,grpo"): trimmed, empty and repeated ones dropped. */
export function parseTags(text) {
  return [...new Set(String(text).split(",").map((tag) => tag.trim()).filter(Boolean))];
}

/**
 * The body of `PATCH /api/jobs/{id}` for an edit: only the fields that changed. An
 * emptied name is null (the run file's name again), emptied notes are null (cleared),
 * tags are the typed list ([] when emptied). null when nothing changed.
 */
export function metaPatch(job, form) {
  const body = {};
  const name = form.name.trim();
  if (name !== (job.name ?? "")) body.name = name || null;
  const tags = parseTags(form.tags);
  const before = Array.isArray(job.tags) ? job.tags : [];
  if (tags.join("\n") !== before.join("\n")) body.tags = tags;
  const notes = form.notes.trim() ? form.notes : "";
  if (notes !== (job.notes ?? "")) body.notes = notes || null;
  return Object.keys(body).length ? body : null;
}

/**
 * A run's progress figures, each named by where it comes from, so that figures shown
 * side by side tell one story:
 * - `trainer`: the step the trainer's status file says it is on (`current_step`);
 * - `stored`: the step of the latest metric record stored (`latest_step`);
 * - `records`: how many metric records are stored (`metrics_count`), fewer than the
 *   steps when the trainer logs every few steps (normal);
 * - `step`: the furthest step either source has reached: what the progress bar shows
 *   (the status file and the metrics file are written and read at different times,
 *   so either can be a step or two ahead of the other).
 */
export function progressFigures(job) {
  const known = (value) => (Number.isInteger(value) && value >= 0 ? value : null);
  const trainer = known(job.current_step);
  const stored = known(job.latest_step);
  const step = trainer === null ? stored : stored === null ? trainer : Math.max(trainer, stored);
  const total = Number.isInteger(job.total_steps) && job.total_steps > 0 ? job.total_steps : null;
  const records = Number.isInteger(job.metrics_count) ? job.metrics_count : 0;
  return { step, total, trainer, stored, records };
}

const count = (n) => n.toLocaleString("en-US");

/** "81 records, up to step 110", "1 record, at step 0", "no records stored yet". */
export function storedText({ records, stored }) {
  if (!records || stored === null) return "no records stored yet";
  return records === 1 ? `1 record, at step ${count(stored)}` : `${count(records)} records, up to step ${count(stored)}`;
}

/** Whether fewer records are stored than steps 0..latest: some steps were not logged. */
export function sparseRecords({ records, stored }) {
  return stored !== null && records > 0 && records < stored + 1;
}

/** The progress bar's tooltip: what its step is, and what each source says. */
export function progressTitle(figures, status = null) {
  const { step, total, trainer, stored } = figures;
  const lines = [];
  if (step === null) lines.push("No step known yet.");
  else if (status === "completed" && total) lines.push(`Completed: ${count(total)} steps.`);
  else lines.push(total ? `Step ${count(step)} of ${count(total)}: the furthest step known.` : `Step ${count(step)}: the furthest step known.`);
  lines.push(trainer === null ? "Trainer's status file: no step." : `Trainer's status file: step ${count(trainer)}.`);
  lines.push(stored === null ? "Stored metrics: none yet." : `Latest stored record: step ${count(stored)}.`);
  return lines.join("\n");
}

/** The stored-records figure's tooltip. */
export function storedTitle(figures) {
  const base = figures.records
    ? `${count(figures.records)} metric record${figures.records === 1 ? "" : "s"} stored, the latest at step ${count(figures.stored ?? 0)}.`
    : "No metric records stored yet.";
  return sparseRecords(figures)
    ? `${base} Fewer records than steps is normal: a trainer that logs every few steps stores one record per logged step.`
    : base;
}

const TOOLS = { verl_file: "verl file logger", tensorboard: "TensorBoard", trackio: "Trackio", mlflow: "MLflow",
  wandb: "W&B" };

/** What an MLflow run's tracking URI names: a server, a file store or a database. */
function trackingStore(uri) {
  if (/^https?:/.test(uri ?? "")) return "tracking server";
  if (/^(file:|\/)/.test(uri ?? "")) return "file store";
  return "tracking database";
}

/**
 * The source column's text: where the run's records are read (this machine, an SSH
 * host, an MLflow tracking store) and, for a run logged by another tool, which tool.
 */
export function sourceLabel(job) {
  const where = job.source === "ssh" && job.ssh ? `ssh ${job.ssh.host}`
    : job.source === "tracking" ? trackingStore(job.tracking_uri) : "local";
  const tool = TOOLS[job.format];
  return tool ? `${tool} · ${where}` : where;
}

/**
 * Which server process ingests the job (several processes on PostgreSQL: the holder
 * of its lease, `ingested_by`), as the source column shows it, and its tooltip.
 * Null on one process (SQLite) or while no live process holds the job.
 */
export function ingesterLabel(job) {
  const by = job.ingested_by;
  if (!by) return null;
  return {
    text: `via ${by.hostname}:${by.pid}`,
    title: `Ingested by server process ${by.pid} on ${by.hostname} (${by.instance_id}), which holds this run's lease`,
  };
}
