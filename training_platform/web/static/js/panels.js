// The run view's side panels: status, anomalies, profiling artifacts.

import { ApiError, api, enc, token } from "./api.js";
import {
  breakable, counted, fmtAgo, fmtBytes, fmtStep, fmtTime, h, progressBar, statusBadge,
} from "./format.js";
import { groupEpisodes, incidentSpan, spanText } from "./incidents.js";
import {
  progressFigures, progressTitle, sparseRecords, storedText, storedTitle,
} from "./jobs_logic.js";
import { isSamplesAnomaly } from "./samples_logic.js";

const MAX_ANOMALY_ROWS = 500;
const SEVERITY_RANK = { info: 0, warning: 1, critical: 2 };
const SOURCE_ORDER = ["callback", "platform"];

/**
 * The progress bar of the furthest step known (the trainer's status file or the
 * latest stored record), its tooltip saying what each source says (jobs_logic.js).
 */
export function progressCell(job) {
  const figures = progressFigures(job);
  const cell = progressBar(figures.step, figures.total, job.status);
  const bar = cell.querySelector(".progress");
  bar.title = `${bar.title}\n${progressTitle(figures, job.status)}`;
  return cell;
}

export function renderStatus(container, job) {
  const figures = progressFigures(job);
  const stored = h("span", { id: "status-stored", title: storedTitle(figures) }, storedText(figures));
  const rows = [
    ["Status", statusBadge(job.status)],
    ["Progress", progressCell(job)],
    ["Trainer's step", h("span", { id: "status-trainer-step", title: "The step the trainer's status file says it is on" },
      figures.trainer === null ? "—" : `${fmtStep(figures.trainer)} (status file)`)],
    ["Stored metrics", sparseRecords(figures)
      ? h("span", {}, stored, h("br"), h("span", { class: "muted stored-note" }, "fewer records than steps: normal when the trainer logs every few steps"))
      : stored],
    ["Started", fmtTime(job.started_at)],
    ["Last update", h("span", { title: fmtTime(job.updated_at) }, fmtAgo(job.updated_at))],
    ["Source", job.source === "ssh" && job.ssh
      ? `ssh ${job.ssh.username}@${job.ssh.host}:${job.ssh.remote_dir}`
      : job.metrics_dir || "local"],
  ];
  if (job.anomaly_reason) rows.push(["Trainer says", job.anomaly_reason]);
  if (job.sync && (job.sync.lines_malformed || job.sync.lines_oversized)) {
    rows.push(["Skipped lines", `${job.sync.lines_malformed} malformed, ${job.sync.lines_oversized} oversized`]);
  }
  if (job.last_sync_error) rows.push(["Sync error", h("span", { class: "error-text" }, job.last_sync_error)]);
  container.replaceChildren(h("dl", { class: "facts" },
    rows.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)])));
}

/**
 * Fold another report of the same (step, type) into `incident`, as the API does:
 * every source named, the highest severity, the callback's message. True if it changed.
 */
export function mergeIncident(incident, anomaly) {
  const before = JSON.stringify(incident);
  const sources = anomaly.sources || [anomaly.source];
  const hadCallback = incident.sources.includes("callback");
  for (const source of sources) if (!incident.sources.includes(source)) incident.sources.push(source);
  incident.sources.sort((a, b) => rankOf(SOURCE_ORDER.indexOf(a)) - rankOf(SOURCE_ORDER.indexOf(b)));
  incident.source = incident.sources[0];
  if ((SEVERITY_RANK[anomaly.severity] ?? 1) > (SEVERITY_RANK[incident.severity] ?? 1)) {
    incident.severity = anomaly.severity;
  }
  if (anomaly.message && (!incident.message || (!hadCallback && sources.includes("callback")))) {
    incident.message = anomaly.message;
  }
  if (Number.isFinite(anomaly.end_step) && !(incident.end_step >= anomaly.end_step)) {
    incident.end_step = anomaly.end_step;
  }
  return JSON.stringify(incident) !== before;
}

function rankOf(index) {
  return index < 0 ? SOURCE_ORDER.length : index;
}

/**
 * Incidents, newest episode first: incidents that started together (docs/platform.md,
 * "Anomalies") are one episode, listed as a heading row and its parts in step order.
 * Each row says how long the incident lasted; `onPick(anomaly)` zooms the charts
 * to it. One found in the samples (source "samples") also links to them:
 * `onSamples(anomaly)`.
 */
export function renderAnomalies(container, anomalies, onPick, onSamples = null) {
  if (!anomalies.length) {
    container.replaceChildren(h("p", { class: "muted" }, "No anomalies."));
    return;
  }
  const row = (a, part) => {
    const sources = (a.sources || [a.source]).join(" + ");
    const span = incidentSpan(a, NaN);
    const lasted = a.ongoing ? "ongoing" : span[1] > span[0] ? `to ${fmtStep(span[1])}` : "";
    return h("tr", {
      class: `incident severity-${a.severity}${part ? " part" : ""}`,
      "data-step": a.step, "data-type": a.type, "data-end": span[1],
    },
    h("td", { class: "step" },
      h("button", { class: "link", title: `Zoom the charts to it (${spanText(a)})`, onclick: () => onPick(a) }, fmtStep(a.step)),
      lasted ? h("div", { class: "lasted muted" }, lasted) : ""),
    h("td", { class: "what" },
      h("span", { class: `badge severity-${a.severity}` }, a.severity),
      h("div", { class: "type" }, breakable(a.type)),
      h("div", { class: "sources muted", title: "Found by" }, sources)),
    h("td", { class: "message" }, a.message,
      onSamples && isSamplesAnomaly(a)
        ? h("div", {}, h("button", {
          class: "link anomaly-samples", title: "Show this step's samples",
          onclick: () => onSamples(a),
        }, `samples at step ${fmtStep(a.step)} →`))
        : ""));
  };
  const episodes = groupEpisodes(anomalies.slice(-MAX_ANOMALY_ROWS)).reverse();
  const bodies = episodes.map((episode) => {
    if (episode.parts.length === 1) return h("tbody", {}, row(episode.parts[0], false));
    const worst = episode.parts.reduce((a, b) => (
      (SEVERITY_RANK[b.severity] ?? 1) > (SEVERITY_RANK[a.severity] ?? 1) ? b : a));
    const last = episode.parts[episode.parts.length - 1].step;
    const head = h("tr", { class: `episode severity-${worst.severity}`, "data-step": episode.step },
      h("td", { colspan: 3 },
        h("strong", {}, `Episode at step ${fmtStep(episode.step)}`),
        ` · ${counted(episode.parts.length, "incident", "incidents")} that started together`
        + (last > episode.step ? ` (steps ${fmtStep(episode.step)}–${fmtStep(last)})` : "")));
    return h("tbody", { class: "episode-group" }, head, ...episode.parts.map((a) => row(a, true)));
  });
  const note = anomalies.length > MAX_ANOMALY_ROWS
    ? h("p", { class: "muted" }, `Latest ${MAX_ANOMALY_ROWS} of ${anomalies.length}.`) : null;
  container.replaceChildren(note || "", h("table", { class: "anomalies" },
    h("colgroup", {}, h("col", { class: "step" }), h("col", { class: "what" }), h("col", { class: "message" })),
    h("thead", {}, h("tr", {}, ["step", "anomaly · found by", "message"].map((t) => h("th", {}, t)))),
    ...bodies));
}

export async function renderArtifacts(container, jobId) {
  let listing;
  try {
    listing = await api(`/jobs/${enc(jobId)}/artifacts`);
  } catch (error) {
    const text = error instanceof ApiError && error.status === 503
      ? "The job's files cannot be read right now." : `Artifacts unavailable (${error.message}).`;
    container.replaceChildren(h("p", { class: "muted" }, text));
    return;
  }
  if (!listing.files.length) {
    container.replaceChildren(h("p", { class: "muted" }, "No profiling artifacts (enable profiling in the callback to get traces per step)."));
    return;
  }
  const link = (file) => h("a", {
    href: `/api/jobs/${enc(jobId)}/artifacts/${file.path.split("/").map(enc).join("/")}`,
    class: "artifact-link",
    download: file.path.split("/").pop(),
    onclick: (event) => downloadWithToken(event),
  }, file.path);
  const profiles = listing.profiles.map((run) => h("li", {},
    h("strong", {}, `${run.name} (step ${fmtStep(run.step)})`),
    h("ul", {}, run.files.map((f) => h("li", {}, link(f), " ", h("span", { class: "muted" }, fmtBytes(f.size)))))));
  const loose = listing.files.filter((f) => f.step === null)
    .map((f) => h("li", {}, link(f), " ", h("span", { class: "muted" }, fmtBytes(f.size))));
  container.replaceChildren(
    h("p", { class: "muted" }, "trace.json opens in Perfetto or chrome://tracing."),
    h("ul", { class: "artifacts" }, profiles, loose),
    listing.truncated ? h("p", { class: "muted" }, "Listing cut at 10,000 files.") : "");
}

/** A plain link cannot carry the Bearer header: with a token, fetch and save instead. */
async function downloadWithToken(event) {
  if (!token()) return;
  event.preventDefault();
  const anchor = event.currentTarget;
  const response = await fetch(anchor.href, { headers: { Authorization: `Bearer ${token()}` } });
  if (!response.ok) return;
  const url = URL.createObjectURL(await response.blob());
  const save = h("a", { href: url, download: anchor.getAttribute("download") });
  save.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
