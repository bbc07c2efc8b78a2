// The run view: REST history + the live WebSocket, charts, status/anomaly/artifact panels.
//
// Data flow: one downsampled overview of the whole run (`?max_points=`), then the
// live stream from its last step (`since_step`), appended as exact points. Zooming
// fetches the visible range again at full fidelity (exact once few enough steps are
// visible). When the live tail outgrows the point budget, the overview is fetched
// again in the background, so a run that goes on for days stays light.
//
// A page opened the moment a run was started, before its metrics file exists, waits:
// the live socket for a job not known yet stays open (server side, bounded) and says
// "waiting"; its first status message means the job exists, and the page loads as
// usual, no reload. Until the first record, "Waiting for the first step" stands
// where the charts will be.

import { allAnomalies, api, enc } from "./api.js";
import { ChartBoard } from "./board.js";
import { runLabel } from "./compare_logic.js";
import {
  counted, debounce, fmtAgo, fmtStep, fmtTime, frameThrottle, h, progressBar, statusBadge,
} from "./format.js";
import { LiveStream } from "./live.js";
import { mergeIncident, renderAnomalies, renderArtifacts, renderStatus } from "./panels.js";
import { ProfileView } from "./profile_view.js";
import { RunConfigSection } from "./run_config.js";
import { tagChips } from "./run_labels.js";
import { SamplesView } from "./samples_view.js";
import { SystemView } from "./system_view.js";
import { Columns } from "./series.js";

const JOB_REFRESH_MS = 5000;
const ANOMALY_REFRESH_MS = 30000; // how often the spans of ongoing incidents are read again

/** How many points a chart can use: about one per device pixel of its width. */
function pointBudget() {
  const width = Math.min(window.innerWidth, 1600) * (window.devicePixelRatio || 1);
  return Math.max(400, Math.min(3000, Math.round(width)));
}

export class RunView {
  constructor(root, jobId, setConnection) {
    this.root = root;
    this.jobId = jobId;
    this.setConnection = setConnection;
    this.overview = new Columns();
    this.live = new Columns();
    this.detail = null;
    this.range = null;
    this.anomalies = []; // incidents: one per (step, type), every source named
    this.incidents = new Map();
    this.probe = null;
    this.stopped = false;
    this.job = null;
    this.stream = null;
    this.timers = [];
    this.reloading = null;
    this.needStepZero = false;
    this.redrawHeader = frameThrottle(() => this.job && this.showJob(this.job));
    this.board = new ChartBoard({
      syncKey: `run:${jobId}`,
      storageKey: `training_platform.charts.${jobId}`,
      onZoom: debounce((lo, hi) => this.zoomTo(lo, hi), 150),
      onReset: () => this.resetZoom(),
      // A click on a chart point: its step's samples (the nearest step with samples).
      onPick: (step) => this.samples.showStepNear(step, { scroll: true }),
    });
    this.samples = new SamplesView(jobId);
    this.profile = new ProfileView(jobId); // the Timing, Memory and Artifacts tabs
    this.system = new SystemView(jobId); // the System tab (its link is among the profile's tabs)
    this.config = new RunConfigSection(); // name, project, tags above; the config below the header
  }

  /** Another tab of this run (#/run/{job}/timing ...), switched in place by main.js. */
  showTab(tab) {
    this.profile.showTab(tab);
    this.system.showTab(this.profile.tab);
  }

  async start() {
    this.layout();
    if (!(await this.isListed()) && !(await this.waitForJob())) return;
    if (this.stopped) return;
    this.samples.start(); // its own errors stay in its panel; the charts do not wait for it
    const [job] = await Promise.all([
      api(`/jobs/${enc(this.jobId)}`),
      this.loadAnomalies(),
      this.loadOverview(),
    ]);
    this.showJob(job);
    renderArtifacts(this.artifactsPanel, this.jobId);
    this.profile.start();
    this.system.start();
    this.stream = new LiveStream(this.jobId, {
      sinceStep: () => this.sinceStep(),
      onMessage: (message) => this.onLive(message),
      onState: (state, detail) => {
        this.setConnection(state, detail);
        // (Re)connected: samples that landed while no socket was open are fetched.
        if (state === "live") this.samples.refreshSteps();
      },
    });
    this.stream.start();
    this.timers.push(setInterval(() => this.refreshJob(), JOB_REFRESH_MS));
  }

  /** Asked through the list, not `/jobs/{id}`: a job that does not exist yet is not an error. */
  async isListed() {
    const body = await api("/jobs");
    return body.jobs.some((job) => job.job_id === this.jobId);
  }

  /** Resolves true once the job exists, false when the server gave up on it (told). */
  waitForJob() {
    this.header.replaceChildren(h("h1", {}, this.jobId), statusBadge("waiting"));
    this.showWaiting(true, "Waiting for the first step: the run has not written its metrics yet…");
    return new Promise((resolve) => {
      const probe = new LiveStream(this.jobId, {
        sinceStep: () => null,
        onMessage: (message) => {
          if (message.type !== "status") return;
          probe.stop(); // the real stream starts from the loaded history
          this.probe = null;
          resolve(true);
        },
        onState: (state, detail) => {
          this.setConnection(state, detail);
          if (state !== "refused" && state !== "closed") return;
          this.probe = null;
          this.showWaiting(false);
          this.header.append(h("p", { class: "error-text", id: "job-missing" },
            detail || `No run ${this.jobId}.`));
          resolve(false);
        },
      });
      this.probe = probe;
      probe.start();
    });
  }

  showWaiting(waiting, text = "Waiting for the first step…") {
    this.waitingNote.hidden = !waiting;
    if (waiting) this.waitingNote.textContent = text;
  }

  stop() {
    this.stopped = true;
    if (this.probe) this.probe.stop();
    if (this.stream) this.stream.stop();
    this.samples.stop();
    this.profile.stop();
    this.system.stop();
    for (const timer of this.timers) clearInterval(timer);
    clearTimeout(this.anomalyRefresh);
    this.board.destroy();
    this.setConnection("idle");
  }

  layout() {
    this.header = h("div", { class: "run-header" });
    this.zoomLabel = h("span", { class: "zoom-label muted" }, "whole run");
    this.statusPanel = h("div", { class: "panel-body", id: "status-panel" });
    this.anomalyPanel = h("div", { class: "panel-body", id: "anomalies-panel" });
    this.artifactsPanel = h("div", { class: "panel-body", id: "artifacts-panel" }, h("p", { class: "muted" }, "Loading…"));
    this.waitingNote = h("p", { class: "waiting-note", id: "waiting-note", hidden: true });
    const toolbar = h("div", { class: "toolbar" },
      this.board.controls,
      h("span", { class: "control" }, this.zoomLabel,
        h("button", { onclick: () => this.board.zoom(null), title: "Or double-click a chart" }, "Reset zoom")),
      h("button", {
        class: "samples-jump", title: "The run's generated samples, step by step (below the charts)",
        onclick: () => this.samples.root.scrollIntoView({ block: "start", behavior: "smooth" }),
      }, "Samples ↓"),
      h("a", { class: "button", href: `#/playback/${enc(this.jobId)}` }, "Playback ▶"));
    const runLayout = h("div", { class: "run-layout" },
        h("div", { class: "run-main" }, this.waitingNote, this.board.root),
        h("aside", { class: "run-side" },
          h("section", { class: "panel" }, h("h2", {}, "Status"), this.statusPanel),
          h("section", { class: "panel" }, h("h2", {}, "Anomalies ", h("span", { class: "count", id: "anomaly-count" }, "0")), this.anomalyPanel),
          h("section", { class: "panel" }, h("h2", {}, "Profiling artifacts"), this.artifactsPanel)));
    this.root.replaceChildren(this.header, this.config.root, this.profile.tabs, toolbar, runLayout, this.samples.root, this.profile.root,
      this.system.root);
    this.profile.setOverview([toolbar, runLayout, this.samples.root]);
    this.system.showTab(this.profile.tab);
  }

  showJob(job) {
    this.job = job;
    const lastStep = this.lastStep() ?? job.latest_step;
    const current = Math.max(job.current_step ?? -1, lastStep ?? -1);
    const label = runLabel(job);
    this.header.replaceChildren(
      h("h1", { class: "run-title", title: label === job.job_id ? null : `job ${job.job_id}` }, label),
      label === job.job_id ? "" : h("span", { class: "muted job-id run-job-id", id: "run-job-id" }, job.job_id),
      job.project ? h("span", { class: "badge project-badge", id: "run-project", title: "project" }, job.project) : "",
      job.tags && job.tags.length ? h("span", { id: "run-tags" }, tagChips(job.tags)) : "",
      statusBadge(job.status),
      progressBar(current < 0 ? null : current, job.total_steps, job.status),
      h("span", { class: "muted", title: fmtTime(job.updated_at) }, `updated ${fmtAgo(job.updated_at)}`),
      this.anomalies.length
        ? h("span", { class: "badge anomaly-badge" }, counted(this.anomalies.length, "anomaly", "anomalies")) : "",
      job.notes ? h("p", { class: "run-notes", id: "run-notes" }, job.notes) : "");
    this.config.show(job);
    renderStatus(this.statusPanel, job);
  }

  async refreshJob() {
    try {
      this.showJob(await api(`/jobs/${enc(this.jobId)}`));
    } catch {
      // Transient (server restarting): the next round tries again.
    }
  }

  async loadAnomalies() {
    const listed = await allAnomalies(this.jobId);
    this.anomalies = [];
    this.incidents = new Map();
    for (const anomaly of listed) this.addAnomaly(anomaly, false);
    this.showAnomalies();
  }

  /**
   * Incidents announced live carry only their onset: how far they reach is the
   * REST list's. While any is ongoing, the list is read again now and then (and
   * once when the run ends), so bands end where their condition did.
   */
  scheduleAnomalyRefresh(delay = ANOMALY_REFRESH_MS) {
    if (this.anomalyRefresh || this.stopped) return; // one pending at a time
    this.anomalyRefresh = setTimeout(async () => {
      this.anomalyRefresh = null;
      try {
        await this.loadAnomalies();
      } catch {
        // Transient: the next announcement or round tries again.
      }
      if (this.anomalies.some((a) => a.ongoing) && this.job?.status === "running") {
        this.scheduleAnomalyRefresh();
      }
    }, delay);
  }

  /** One incident per (step, type): a second source of the same one is merged into it. */
  addAnomaly(anomaly, show = true) {
    const key = `${anomaly.step}|${anomaly.type}`;
    const known = this.incidents.get(key);
    if (known) {
      if (!mergeIncident(known, anomaly)) return;
    } else {
      const incident = { ...anomaly, sources: [...(anomaly.sources || [anomaly.source])] };
      this.incidents.set(key, incident);
      this.anomalies.push(incident);
    }
    if (show) this.showAnomalies();
  }

  showAnomalies() {
    this.anomalies.sort((a, b) => a.step - b.step);
    renderAnomalies(this.anomalyPanel, this.anomalies, (a) => this.focusStep(a.step),
      (a) => this.samples.showStepNear(a.step, { scroll: true }));
    this.root.querySelector("#anomaly-count").textContent = String(this.anomalies.length);
    this.board.setAnomalies(this.anomalies);
  }

  focusStep(step) {
    const span = Math.max(20, Math.round(((this.lastStep() ?? step) - (this.overview.firstStep ?? 0)) / 100));
    this.board.zoom([Math.max(0, step - span), step + span]);
  }

  async loadOverview() {
    const body = await api(`/monitoring/${enc(this.jobId)}/metrics?max_points=${pointBudget()}`);
    this.overview = Columns.fromHistory(body);
    // Keep only live points the new overview does not already hold.
    const end = this.overview.lastStep;
    if (end !== null) this.live = this.live.slice(end + 1, null);
    this.draw();
  }

  lastStep() {
    return this.live.lastStep ?? this.overview.lastStep;
  }

  /**
   * Where the live stream resumes. `since_step` cannot say "before step 0", so with
   * no history yet we ask from 0 and fetch step 0 itself once the stream is
   * subscribed (it is then either stored, or on its way live).
   */
  sinceStep() {
    const last = this.lastStep();
    if (last !== null) return last;
    this.needStepZero = true;
    return 0;
  }

  async fetchStepZero() {
    this.needStepZero = false;
    const body = await api(`/monitoring/${enc(this.jobId)}/metrics?start_step=0&end_step=0`);
    if (!body.metrics.length || this.live.firstStep === 0 || this.overview.firstStep === 0) return;
    const head = new Columns();
    head.appendRecord(body.metrics[0]);
    this.live = head.concat(this.live);
    this.draw();
  }

  /** Messages are handled one at a time, in order, even when one needs a fetch. */
  onLive(message) {
    this.queue = (this.queue || Promise.resolve())
      .then(() => this.handleLive(message))
      .catch((error) => showBanner(`Live update failed: ${error.message}`));
  }

  async handleLive(message) {
    switch (message.type) {
      case "metric":
        await this.onRecord(message);
        break;
      case "status":
        if (this.job) this.showJob({ ...this.job, ...message.data });
        break;
      case "anomaly":
        // Just found, on a running run: open until the list says how far it went.
        this.addAnomaly({ ongoing: true, ...message.data });
        this.scheduleAnomalyRefresh();
        break;
      case "samples":
        this.samples.onLive(message); // fetches on its own, batched: the records do not wait
        break;
      case "system":
        this.system.onLive(message); // drawn only while the System tab is on show
        break;
      case "finished":
        if (this.job) this.showJob({ ...this.job, status: message.status });
        if (this.anomalies.some((a) => a.ongoing)) this.scheduleAnomalyRefresh(0);
        break;
      case "error":
        showBanner(`Live stream: ${message.detail}`);
        break;
      default:
        break;
    }
  }

  async onRecord(message) {
    let record = message.data;
    if (message.truncated) {
      // Too big for one WebSocket message: the server sent its step only.
      const body = await api(`/monitoring/${enc(this.jobId)}/metrics?start_step=${record.step}&end_step=${record.step}`);
      if (!body.metrics.length) return;
      [record] = body.metrics;
    }
    if (this.needStepZero && record.step > 0) await this.fetchStepZero();
    else if (record.step === 0) this.needStepZero = false;
    const last = this.lastStep();
    if (record.step === last && this.live.replaceLastRecord(record)) {
      this.draw(); // the newest step completed (another tool's tags, read apart)
      return;
    }
    if (last !== null && record.step <= last) {
      // A step written again (a run resumed from a checkpoint): reload history.
      this.scheduleReload();
      return;
    }
    // Anomalies arrive as `anomaly` messages only (the rows as stored, every
    // source of an incident named): the record's own `anomalies` are not read.
    this.live.appendRecord(record);
    if (this.job) {
      this.job = { ...this.job, latest_step: record.step, updated_at: record.timestamp ?? this.job.updated_at };
    }
    if (this.live.length > pointBudget() && !this.range) this.scheduleReload();
    this.draw();
  }

  scheduleReload() {
    if (this.reloading) return;
    this.reloading = setTimeout(async () => {
      try {
        await this.loadOverview();
      } finally {
        this.reloading = null;
      }
    }, 500);
  }

  async zoomTo(lo, hi) {
    this.range = [lo, hi];
    const asked = `${lo}-${hi}`;
    this.zoomLabel.textContent = `steps ${fmtStep(lo)}–${fmtStep(hi)}…`;
    const body = await api(`/monitoring/${enc(this.jobId)}/metrics?max_points=${pointBudget()}&start_step=${lo}&end_step=${hi}`);
    if (!this.range || `${this.range[0]}-${this.range[1]}` !== asked) return; // superseded
    this.detail = Columns.fromHistory(body);
    this.zoomLabel.textContent = `steps ${fmtStep(lo)}–${fmtStep(hi)} · ${body.downsampled ? `${fmtStep(body.bucket_steps)} steps per point` : "every step"}`;
    this.draw();
  }

  resetZoom() {
    this.range = null;
    this.detail = null;
    this.zoomLabel.textContent = "whole run";
    this.draw();
  }

  draw() {
    let columns;
    if (this.detail && this.range) {
      const end = this.detail.lastStep ?? this.range[0] - 1;
      columns = this.detail.concat(this.live.slice(end + 1, this.range[1]));
    } else {
      columns = this.overview.concat(this.live);
    }
    this.board.setColumns(columns);
    this.profile.setColumns(columns);
    this.system.setColumns(columns);
    this.showWaiting(this.lastStep() === null);
    this.redrawHeader();
  }
}

export function showBanner(text) {
  const banner = document.getElementById("banner");
  banner.textContent = text;
  banner.hidden = !text;
}
