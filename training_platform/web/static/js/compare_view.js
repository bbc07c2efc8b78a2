// The Compare view (`#/compare?jobs=a,b,c&x=step&smoothing=0.6&fields=...`): several
// runs side by side, one chart per metric with a line per run.
//
// Data flow: one `GET /api/compare` for all the runs (columnar, at most ~one point per
// pixel of a chart; with smoothing, the server smooths the exact values before it
// downsamples, so a spike never hides in the average), then each run that is still
// going follows its own live WebSocket from the last step it holds (as the run view
// does, live.js), its new records appended as exact points with the smoothing
// continued from the last smoothed value (compare_logic.js). A change of the x axis
// or of the smoothing asks the server again; the charts shown (`fields`) are the
// reader's, from the union of the runs' metrics. A zoom on the step axis asks the
// server for that range at full detail (`start_step`/`end_step`, the smoothing still
// the whole run's), as the run view does; on the time and token axes, whose x the
// server cannot turn into one step range for every run, a zoom magnifies the points.
//
// Everything the view is showing lives in the URL, so a comparison is a link. An
// unknown run makes the API refuse the whole request (404 naming it): the message is
// shown with a button to take that run out; a link naming more runs than a comparison
// holds keeps the first 20 and says so.
//
// The replay bar (compare_replay.js) replays the runs together on the view's x axis,
// from the data already held: the charts are cut at its position (compare_chart.js).

import { ApiError, allAnomalies, api, enc } from "./api.js";
import { CompareChart } from "./compare_chart.js";
import { ReplayBar } from "./compare_replay.js";
import { isSystemKey, systemApiQuery, systemRuns, systemUnion } from "./compare_system.js";
import {
  MAX_RUNS, MAX_SMOOTHING, MAX_WINDOW, X_MODES, appendLive, chosenFields, clampSmoothing,
  compareApiQuery, compareHash, configDiffRows, lastStepOf, metricUnion, parseCompareState,
  runColors, runFromCompare, runLabel, timeOrigin,
} from "./compare_logic.js";
import { debounce, fmtStep, frameThrottle, h, statusBadge } from "./format.js";
import { jobsHash, parseJobsState } from "./jobs_logic.js";
import { LiveStream } from "./live.js";
import { groupMetrics } from "./metric_groups.js";
import { healthBadge, swatch } from "./run_labels.js";
import { flattenRecord } from "./series.js";
import { buildQuery } from "./url_state.js";

const JOB_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const FINISHED = new Set(["completed", "failed", "stopped"]);
const SEVERITY_HEALTH = { critical: "critical", warning: "warning" };
const LIST_LIMIT = 500; // the most one GET /api/jobs answers

/** Points per run and series: about one per device pixel of a chart (two per row). */
function pointBudget() {
  const width = (Math.min(window.innerWidth, 1600) / 2) * (window.devicePixelRatio || 1);
  return Math.max(200, Math.min(2000, Math.round(width)));
}

export class CompareView {
  constructor(root, query, setConnection) {
    this.root = root;
    this.setConnection = setConnection;
    const state = parseCompareState(query);
    this.dropped = Math.max(0, state.jobs.length - MAX_RUNS);
    state.jobs = state.jobs.slice(0, MAX_RUNS);
    this.state = state;
    this.runs = [];
    this.union = [];
    this.systemKeys = []; // the System series the runs have (compare_system.js)
    this.systemRuns = null; // their points per run, once a System chart asked for them
    this.charts = new Map();
    this.anomalies = new Map(); // job id → its anomalies (incidents), for the markers
    this.streams = [];
    this.loading = 0;
    this.stopped = false;
    this.range = null;
    this.detail = null; // the runs as asked for the zoomed range (x = step), or null
    this.detailAsked = 0; // bumped by every zoom: an older range's answer is dropped
    this.zoomDetail = debounce((range) => this.fetchDetail(range), 150);
    this.redraw = frameThrottle(() => this.drawCharts());
    this.redrawRuns = frameThrottle(() => this.showRuns());
    this.reloadSoon = debounce(() => this.load(), 500);
    this.reloadSmoothed = debounce(() => this.load(), 250);
    this.replay = new ReplayBar({
      runs: () => this.runs,
      mode: () => this.state.x,
      onMove: () => this.showReplay(),
    });
    this.chartCtx = {
      syncKey: "compare",
      xMode: () => this.state.x,
      smoothed: () => Boolean(this.state.smoothing || this.state.window),
      anomalies: (jobId) => this.anomalies.get(jobId) || [],
      replay: () => this.replay.position(),
      onZoom: (lo, hi) => this.zoom([lo, hi]),
      onReset: () => this.zoom(null),
      onRemove: (key) => this.setFields(this.shownFields().filter((k) => k !== key)),
    };
    // The System series are never smoothed: their legend and CSV say the raw values.
    this.systemCtx = { ...this.chartCtx, smoothed: () => false };
  }

  async start() {
    this.layout();
    if (this.dropped) {
      this.saveState();
      this.showNotice(`The link named ${this.state.jobs.length + this.dropped} runs; a comparison holds at most `
        + `${MAX_RUNS} (the API's limit): showing the first ${MAX_RUNS}.`);
    }
    await this.load();
  }

  stop() {
    this.stopped = true;
    this.replay.destroy();
    this.stopStreams();
    for (const chart of this.charts.values()) chart.destroy();
    this.charts.clear();
    this.setConnection("idle");
  }

  // --- layout ---------------------------------------------------------------------------

  layout() {
    this.title = h("h1", {}, "Compare");
    this.pickLink = h("a", { id: "compare-pick", href: "#/" }, "← change the runs");
    this.errorBox = h("div", { class: "error-box compare-error", id: "compare-error", role: "alert", hidden: true });
    this.notice = h("p", { class: "compare-notice", id: "compare-notice", hidden: true });
    this.runsBody = h("tbody", { id: "compare-runs" });
    this.xSelect = h("select", { id: "compare-x", "aria-label": "x axis",
      onchange: () => this.setState({ x: this.xSelect.value }, { reload: true }) },
      X_MODES.map((mode) => h("option", { value: mode.id, selected: mode.id === this.state.x }, mode.label)));
    this.method = h("select", { id: "compare-method", "aria-label": "Smoothing method",
      onchange: () => this.setMethod(this.method.value) },
      h("option", { value: "ema", selected: !this.state.window }, "EMA"),
      h("option", { value: "window", selected: Boolean(this.state.window) }, "mean of last n"));
    this.slider = h("input", { type: "range", id: "compare-smoothing", min: "0", max: String(MAX_SMOOTHING),
      step: "0.01", value: String(this.state.smoothing), "aria-label": "Smoothing weight",
      oninput: () => this.setSmoothing(Number(this.slider.value)) });
    this.sliderValue = h("output", { id: "compare-smoothing-value" }, this.state.smoothing.toFixed(2));
    this.windowInput = h("input", { type: "number", id: "compare-window", min: "1", max: String(MAX_WINDOW),
      step: "1", value: String(this.state.window || 10), "aria-label": "Window (values)",
      onchange: () => this.setWindow(Number.parseInt(this.windowInput.value, 10)) });
    this.picker = h("select", { id: "compare-metric", "aria-label": "Metric to add as a chart", class: "series-picker" });
    this.zoomLabel = h("span", { class: "zoom-label muted", id: "compare-zoom" }, "whole runs");
    this.grid = h("div", { class: "chart-grid cmp-grid", id: "compare-charts" });
    this.chartsNote = h("p", { class: "muted", id: "compare-charts-note", hidden: true });
    this.configPanel = h("div", { class: "cmp-config", id: "compare-config" }, h("p", { class: "muted" }, "Loading…"));
    const toolbar = h("div", { class: "toolbar", id: "compare-toolbar" },
      h("label", { class: "control", title: "What the x axis measures: the step, seconds since the run's first record, or tokens seen so far" },
        "x axis ", this.xSelect),
      h("span", { class: "control", title: "Computed by the server on the exact values, before downsampling; the faint band keeps each run's raw min/max" },
        "Smoothing ", this.method, this.slider, this.sliderValue, this.windowInput),
      h("span", { class: "control" }, this.picker,
        h("button", { type: "button", id: "compare-add", onclick: () => this.addPicked() }, "Add chart")),
      h("span", { class: "control" }, this.zoomLabel,
        h("button", { type: "button", onclick: () => this.zoom(null), title: "Or double-click a chart" }, "Reset zoom")));
    this.showMethod();
    this.root.replaceChildren(
      h("div", { class: "page-head" }, this.title, this.pickLink),
      this.errorBox,
      this.notice,
      h("section", { class: "panel cmp-runs" },
        h("table", { class: "cmp-runs-table" },
          h("thead", {}, h("tr", {}, ["", "run", "project", "status", "health", "latest step", "live", ""]
            .map((title) => h("th", {}, title)))),
          this.runsBody)),
      toolbar,
      this.replay.root,
      this.grid,
      this.chartsNote,
      h("section", { class: "panel cmp-config-panel" }, h("h2", {}, "Config differences"), this.configPanel));
  }

  showNotice(text) {
    this.notice.textContent = text;
    this.notice.hidden = !text;
  }

  // --- state ------------------------------------------------------------------------------

  /** The URL follows the state without navigating (no reload of the view). */
  saveState() {
    window.history.replaceState(null, "", compareHash(this.state));
    this.pickLink.href = jobsHash({ ...parseJobsState(""), selected: this.state.jobs });
  }

  setState(patch, { reload = false } = {}) {
    this.state = { ...this.state, ...patch };
    this.saveState();
    if (reload) {
      this.range = null;
      this.load();
    }
  }

  setSmoothing(weight) {
    const smoothing = clampSmoothing(weight);
    this.sliderValue.textContent = smoothing.toFixed(2);
    this.setState({ smoothing, window: null });
    this.reloadSmoothed(); // the server smooths: ask again once the slider rests
  }

  setWindow(n) {
    if (!Number.isInteger(n) || n < 1) return;
    this.setState({ window: Math.min(n, MAX_WINDOW), smoothing: 0 });
    this.reloadSmoothed();
  }

  setMethod(method) {
    if (method === "window") this.setWindow(Number.parseInt(this.windowInput.value, 10) || 10);
    else this.setSmoothing(Number(this.slider.value));
    this.showMethod();
  }

  showMethod() {
    const windowed = Boolean(this.state.window);
    this.slider.hidden = windowed;
    this.sliderValue.hidden = windowed;
    this.windowInput.hidden = !windowed;
  }

  removeRun(jobId) {
    this.setState({ jobs: this.state.jobs.filter((id) => id !== jobId) }, { reload: true });
  }

  shownFields() {
    return chosenFields(this.state.fields, this.union);
  }

  setFields(fields) {
    this.setState({ fields });
    this.drawCharts();
  }

  addPicked() {
    const key = this.picker.value;
    if (key) this.setFields([...this.shownFields(), key]);
  }

  zoom(range) {
    this.range = range;
    this.detailAsked += 1;
    const hadDetail = Boolean(this.detail);
    this.detail = null;
    for (const chart of this.charts.values()) chart.setRange(range);
    this.zoomLabel.textContent = range ? "zoomed" : "whole runs";
    if (range && this.state.x === "step") this.zoomDetail(range);
    else if (hadDetail) this.drawCharts(); // back to the whole runs' points
  }

  /** The zoomed steps at full detail (at most a point per pixel, as the whole runs). */
  async fetchDetail(range) {
    if (this.range !== range) return; // reset or zoomed again before the debounce ran
    const asked = this.detailAsked;
    const lo = Math.max(0, Math.floor(range[0]));
    const hi = Math.ceil(range[1]);
    if (!(hi >= lo)) return;
    this.zoomLabel.textContent = `steps ${fmtStep(lo)}–${fmtStep(hi)}…`;
    let body;
    try {
      body = await api(`/compare?${compareApiQuery(this.state, pointBudget())}&start_step=${lo}&end_step=${hi}`);
    } catch (error) {
      if (asked === this.detailAsked && !this.stopped) this.zoomLabel.textContent = `zoomed (no detail: ${error.message})`;
      return;
    }
    if (asked !== this.detailAsked || this.range !== range || this.stopped) return; // zoomed again, or reset
    const whole = new Map(this.runs.map((run) => [run.jobId, run]));
    this.detail = body.jobs.map((entry) => {
      const run = runFromCompare(entry);
      const known = whole.get(run.jobId);
      run.label = known ? known.label : runLabel(entry);
      run.color = known ? known.color : runColors([run.jobId]).get(run.jobId);
      run.timeOrigin = known ? known.timeOrigin : timeOrigin(run);
      return run;
    });
    const widest = Math.max(1, ...body.jobs.map((entry) => (entry.downsampled ? entry.bucket_steps : 1)));
    this.zoomLabel.textContent = `steps ${fmtStep(lo)}–${fmtStep(hi)} · `
      + (widest > 1 ? `up to ${fmtStep(widest)} steps per point` : "every step");
    this.drawCharts();
  }

  // --- loading ----------------------------------------------------------------------------

  async load() {
    if (this.stopped) return;
    const mine = ++this.loading;
    this.stopStreams();
    this.saveState();
    const { jobs } = this.state;
    this.title.textContent = `Compare ${jobs.length} run${jobs.length === 1 ? "" : "s"}`;
    if (!jobs.length) {
      this.errorBox.hidden = true;
      this.runs = [];
      this.showRuns();
      this.drawCharts();
      this.configPanel.replaceChildren();
      this.chartsNote.textContent = "No runs to compare: tick some on the jobs list (← change the runs).";
      this.chartsNote.hidden = false;
      return;
    }
    const unknown = await this.unknownRuns(jobs);
    if (mine !== this.loading || this.stopped) return;
    if (unknown.length) {
      this.showUnknown(unknown);
      return;
    }
    let body;
    try {
      body = await api(`/compare?${compareApiQuery(this.state, pointBudget())}`);
    } catch (error) {
      if (mine === this.loading && !this.stopped) await this.showLoadError(error);
      return;
    }
    if (mine !== this.loading || this.stopped) return; // superseded by a newer request
    this.errorBox.hidden = true;
    const colors = runColors(body.jobs.map((entry) => entry.job_id));
    this.runs = body.jobs.map((entry) => {
      const run = runFromCompare(entry);
      run.label = runLabel(entry);
      run.color = colors.get(run.jobId);
      run.timeOrigin = timeOrigin(run);
      run.liveState = FINISHED.has(run.status) ? "" : "connecting";
      run.appended = 0;
      return run;
    });
    this.systemKeys = systemUnion(body.jobs);
    this.systemRuns = null;
    this.systemLoading = null;
    this.union = this.unionOf();
    this.showRuns();
    this.detail = null;
    this.drawCharts();
    if (this.range) this.zoom(this.range); // e.g. the smoothing changed: its detail again
    this.loadConfig(mine);
    this.loadAnomalies(mine);
    this.startStreams();
  }

  /**
   * The runs of `jobs` this server does not know, found before the comparison is
   * asked for: the API refuses the whole request for one unknown run (404, naming
   * the first only), so the reader learns every one at once, and the browser logs
   * no failed request. Asked through the list (`q=`, which always answers 200), once
   * per run and page; a run the list cannot settle counts as known (the comparison's
   * own 404 then tells).
   */
  async unknownRuns(jobs) {
    this.known = this.known || new Set();
    const checks = await Promise.all(jobs.map(async (jobId) => {
      if (this.known.has(jobId)) return null;
      if (!JOB_ID.test(jobId)) return jobId;
      try {
        const body = await api(`/jobs?q=${enc(jobId)}&limit=${LIST_LIMIT}`);
        if (body.jobs.some((job) => job.job_id === jobId) || body.jobs.length >= LIST_LIMIT) {
          this.known.add(jobId);
          return null;
        }
        return jobId;
      } catch {
        return null; // cannot tell: the comparison itself will
      }
    }));
    return checks.filter(Boolean);
  }

  showUnknown(unknown) {
    const message = unknown.map((id) => (JOB_ID.test(id) ? `job '${id}' not found` : `'${id}' is not a job id`)).join("; ");
    this.showError(`${message}.`, unknown);
  }

  /**
   * The API refused the comparison: its message, and for a 404 (a run deleted since
   * the page checked) or a 422 every run that is to blame, offered for removal.
   */
  async showLoadError(error) {
    let culprits = [];
    if (error instanceof ApiError && (error.status === 404 || error.status === 422)) {
      this.known = new Set();
      culprits = await this.unknownRuns(this.state.jobs);
    }
    this.showError(error.message, culprits);
  }

  showError(message, culprits) {
    this.runs = [];
    this.showRuns();
    this.drawCharts();
    this.configPanel.replaceChildren();
    this.errorBox.replaceChildren(
      h("h2", {}, "This comparison cannot be shown"),
      h("p", { class: "compare-error-message" }, message),
      culprits.length ? h("p", {}, culprits.map((id) => h("button", { type: "button", class: "remove-unknown",
        "data-job": id, onclick: () => this.removeRun(id) }, `Remove ${id} from the comparison`))) : "",
      h("p", {}, h("button", { type: "button", onclick: () => this.load() }, "Try again")));
    this.errorBox.hidden = false;
  }

  /** Each run's stored anomalies, for the charts' markers (a run that fails shows none). */
  /** What the picker offers: the runs' metrics, then their System series. */
  unionOf() {
    return [...metricUnion(this.runs).filter((key) => !isSystemKey(key)), ...this.systemKeys];
  }

  /**
   * The System points of every run (all their System series at once, so a second
   * System chart draws at once), asked when the first System chart is shown.
   */
  async loadSystem(mine) {
    if (this.systemLoading === mine) return;
    this.systemLoading = mine;
    let body;
    try {
      body = await api(`/compare?${systemApiQuery(this.state, pointBudget())}`);
    } catch (error) {
      if (mine === this.loading && !this.stopped) this.showNotice(`No system series: ${error.message}`);
      return;
    }
    if (mine !== this.loading || this.stopped) return;
    this.systemRuns = systemRuns(this.runs, body);
    this.drawCharts();
  }

  async loadAnomalies(mine) {
    const found = await Promise.all(this.runs.map((run) => allAnomalies(run.jobId).catch(() => [])));
    if (mine !== this.loading || this.stopped) return;
    this.anomalies = new Map(this.runs.map((run, i) => [run.jobId, found[i]]));
    for (const chart of this.charts.values()) chart.showAnomalies();
  }

  /** A live `anomaly` message: one more marker, unless the run already has that incident. */
  addAnomaly(run, anomaly) {
    const known = this.anomalies.get(run.jobId) || [];
    if (known.some((a) => a.step === anomaly.step && a.type === anomaly.type)) return;
    this.anomalies.set(run.jobId, [...known, anomaly]);
    for (const chart of this.charts.values()) chart.showAnomalies();
  }

  async loadConfig(mine) {
    let body;
    try {
      body = await api(`/compare/config?${buildQuery([["jobs", this.state.jobs]])}`);
    } catch (error) {
      if (mine === this.loading) {
        this.configPanel.replaceChildren(h("p", { class: "error-text" }, `No config diff: ${error.message}`));
      }
      return;
    }
    if (mine !== this.loading || this.stopped) return;
    this.showConfig(body);
  }

  showConfig(body) {
    const runs = this.runs;
    const rows = configDiffRows(body, runs.map((run) => run.jobId));
    const same = body.same ?? 0;
    const summary = h("p", { class: "muted", id: "config-same" },
      `${same.toLocaleString("en-US")} key${same === 1 ? " is" : "s are"} the same in every run`
      + `${rows.length ? "; the keys below differ." : "."}`
      + " A run without a run file counts as an empty config.");
    if (!rows.length) {
      this.configPanel.replaceChildren(
        h("p", { id: "config-none" }, same ? "The configs do not differ." : "No config to compare: these runs have none."),
        summary);
      return;
    }
    this.configPanel.replaceChildren(summary,
      h("div", { class: "cmp-config-wrap" },
        h("table", { class: "cmp-config-table", id: "config-diff" },
          h("thead", {}, h("tr", {}, h("th", {}, "key"), runs.map((run) => h("th", { "data-job": run.jobId },
            swatch(run.color), run.label)))),
          h("tbody", {}, rows.map((row) => h("tr", { "data-key": row.key },
            h("td", { class: "config-key" }, row.key),
            row.cells.map((cell) => h("td", { class: cell.missing ? "config-value missing" : "config-value",
              "data-job": cell.jobId, title: cell.text }, cell.text))))))));
  }

  // --- drawing ----------------------------------------------------------------------------

  showRuns() {
    this.runsBody.replaceChildren(...this.runs.map((run) => h("tr", { "data-job": run.jobId },
      h("td", {}, swatch(run.color)),
      h("td", {}, h("a", { href: `#/run/${enc(run.jobId)}`, class: "run-name" }, run.label),
        run.label !== run.jobId ? h("span", { class: "job-id muted" }, run.jobId) : ""),
      h("td", { class: "muted" }, run.project ?? "–"),
      h("td", {}, statusBadge(run.status)),
      h("td", {}, healthBadge(run.health)),
      h("td", { class: "latest-step" }, fmtStep(lastStepOf(run))),
      h("td", { class: "live-state", "data-state": run.liveState || "none" }, run.liveState || "–"),
      h("td", {}, h("button", { type: "button", class: "link remove-run", title: `Take ${run.jobId} out of the comparison`,
        onclick: () => this.removeRun(run.jobId) }, "remove")))));
  }

  /** The replay moved: every chart cut at its position (or whole again). */
  showReplay() {
    for (const chart of this.charts.values()) chart.showReplay();
  }

  drawCharts() {
    this.replay.refresh(); // the runs (or the x axis) may have changed: so does the replay's span
    const fields = this.runs.length ? this.shownFields() : [];
    for (const [key, chart] of this.charts) {
      if (!fields.includes(key)) {
        chart.destroy();
        chart.root.remove();
        this.charts.delete(key);
      }
    }
    for (const key of fields) {
      let chart = this.charts.get(key);
      if (!chart) {
        chart = new CompareChart(key, isSystemKey(key) ? this.systemCtx : this.chartCtx);
        this.charts.set(key, chart);
      }
      this.grid.append(chart.root); // (re)appended in the chosen order
      if (this.range) chart.range = this.range;
      if (!isSystemKey(key)) chart.update(this.detail || this.runs);
      else if (this.systemRuns) chart.update(this.systemRuns); // zoomed: magnified, not fetched
      else this.loadSystem(this.loading);
    }
    if (this.runs.length) {
      this.chartsNote.textContent = fields.length ? "" : "No chart: add a metric from the picker above.";
      this.chartsNote.hidden = Boolean(fields.length);
    }
    const shown = new Set(fields);
    const options = this.union.filter((key) => !shown.has(key));
    // Rebuilt only when the offer changed (live records redraw often): the reader's
    // choice in it stays while they reach for "Add chart". By group, as the run
    // page's picker (metric_groups.js), after a prompt: nothing is chosen to start.
    if (this.offered !== options.join("\n")) {
      this.offered = options.join("\n");
      const chosen = this.picker.value;
      this.picker.replaceChildren(h("option", { value: "" }, options.length ? "choose a metric…" : "every metric has a chart"),
        ...groupMetrics(options).map((group) => h("optgroup", { label: group.title },
          group.items.map((item) => h("option", { value: item.key, selected: item.key === chosen, title: item.title },
            item.key)))));
    }
    this.picker.disabled = options.length === 0;
  }

  // --- live -------------------------------------------------------------------------------

  startStreams() {
    for (const run of this.runs) {
      if (FINISHED.has(run.status)) continue;
      const stream = new LiveStream(run.jobId, {
        sinceStep: () => {
          const last = lastStepOf(run);
          if (last !== null) return last;
          run.needStepZero = true; // `since_step` cannot say "before 0": fetch it apart
          return 0;
        },
        onMessage: (message) => this.onLive(run, message),
        onState: (state) => {
          run.liveState = state;
          this.showConnection();
          this.redrawRuns();
        },
      });
      this.streams.push(stream);
      stream.start();
    }
    this.showConnection();
  }

  stopStreams() {
    for (const stream of this.streams) stream.stop();
    this.streams = [];
  }

  showConnection() {
    const followed = this.runs.filter((run) => !FINISHED.has(run.status) || run.liveState === "live");
    if (!this.streams.length) {
      this.setConnection("idle");
      return;
    }
    const live = this.runs.filter((run) => run.liveState === "live").length;
    const trouble = this.runs.find((run) => run.liveState === "reconnecting" || run.liveState === "connecting");
    const detail = `${live} of ${followed.length} running run${followed.length === 1 ? "" : "s"} live`;
    if (live) this.setConnection("live", detail);
    else if (trouble) this.setConnection(trouble.liveState, detail);
    else this.setConnection("closed", detail);
  }

  /** A run's messages are handled one at a time, in order, even when one needs a fetch. */
  onLive(run, message) {
    run.queue = (run.queue || Promise.resolve())
      .then(() => this.handleLive(run, message))
      .catch((error) => this.showNotice(`Live update of ${run.jobId} failed: ${error.message}`));
  }

  async handleLive(run, message) {
    if (!this.runs.includes(run)) return; // from before a reload
    switch (message.type) {
      case "metric":
        await this.onRecord(run, message);
        break;
      case "status":
        run.status = message.data.status;
        this.redrawRuns();
        break;
      case "finished":
        run.status = message.status;
        this.redrawRuns();
        break;
      case "anomaly": {
        const worse = SEVERITY_HEALTH[message.data.severity];
        if (worse === "critical" || (worse === "warning" && run.health === "ok")) run.health = worse;
        this.addAnomaly(run, message.data);
        this.redrawRuns();
        break;
      }
      case "error":
        this.showNotice(`Live stream of ${run.jobId}: ${message.detail}`);
        break;
      default:
        break;
    }
  }

  async onRecord(run, message) {
    let record = message.data;
    if (message.truncated) {
      // Too big for one WebSocket message: the server sent its step only.
      record = await this.fetchRecord(run, record.step);
      if (!record) return;
    }
    if (run.needStepZero) {
      run.needStepZero = false;
      const first = record.step > 0 ? await this.fetchRecord(run, 0) : null;
      if (first && lastStepOf(run) === null) this.append(run, first);
    }
    const last = lastStepOf(run);
    if (last !== null && record.step <= last) {
      this.reloadSoon(); // a step written again (a resumed run): ask for the history again
      return;
    }
    this.append(run, record);
    run.appended += 1;
    if (run.appended > pointBudget()) this.reloadSoon(); // the live tail outgrew the budget
  }

  async fetchRecord(run, step) {
    const body = await api(`/monitoring/${enc(run.jobId)}/metrics?start_step=${step}&end_step=${step}`);
    return body.metrics.length ? body.metrics[0] : null;
  }

  append(run, record) {
    const values = flattenRecord(record);
    const options = { mode: this.state.x, weight: this.state.smoothing, window: this.state.window };
    appendLive(run, record, values, options);
    // A live record inside the zoomed range joins its detail too.
    const zoomed = this.detail && this.detail.find((detail) => detail.jobId === run.jobId);
    const after = zoomed ? lastStepOf(zoomed) : null;
    const inside = zoomed && record.step >= this.range[0] && record.step <= this.range[1];
    if (inside && (after === null || record.step > after)) {
      appendLive(zoomed, record, values, options);
    }
    if (Object.keys(values).some((key) => !this.union.includes(key))) this.union = this.unionOf();
    this.redraw();
    this.redrawRuns();
  }
}
