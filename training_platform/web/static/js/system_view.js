// The run page's System tab (#/run/{job}/system): one host's GPU, CPU, memory, disk
// and network samples (GET /api/monitoring/{job}/system) on a shared wall-clock
// axis, under the run's stage timing on the same axis, so an idle GPU during a
// stage shows at a glance. A host picker when the job has samples of several hosts;
// while the tab is open, the live socket's `system` messages of the host on show
// are appended (system_logic.js keeps at most LIVE_LIMIT points). A drag zooms every
// chart (the range is read again at full fidelity), a double-click goes back.

import { api, enc } from "./api.js";
import { counted, frameThrottle, h } from "./format.js";
import { SystemChart } from "./system_chart.js";
import {
  SYSTEM_CHARTS, appendSample, chartData, chartLines, emptyStore, pickHost, storeFromAnswer, timeExtent, timingStack,
} from "./system_logic.js";

/** Points asked per series: about one per device pixel of a chart's width. */
function pointBudget() {
  const width = Math.min(window.innerWidth, 1600) * (window.devicePixelRatio || 1);
  return Math.max(400, Math.min(3000, Math.round(width)));
}

function emptyState(jobId) {
  const code = (text) => h("code", {}, text);
  return [
    h("h2", {}, "No system samples for this job yet"),
    h("p", {}, "The trainer's sampler writes ", code(`${jobId}_system.jsonl`),
      " next to the metrics (PlatformCallback's ", code("system_metrics_interval"), ", on by default at 10 s)."),
    h("p", {}, "Other nodes of the job: run ", code(`training-platform sysmon ${jobId} --output-dir DIR`),
      " on each, with DIR the run's metrics directory."),
  ];
}

export class SystemView {
  constructor(jobId) {
    this.jobId = jobId;
    this.active = false;
    this.started = false;
    this.stopped = false;
    this.hosts = [];
    this.host = null;
    this.store = emptyStore();
    this.answered = null; // what the shown points are ("every sample", min/max of ...)
    this.columns = null;
    this.zoom = null;
    this.loaded = false;
    this.requests = 0; // bumped per load: an older answer must not replace a newer one
    this.redraw = frameThrottle(() => this.draw());
    const ctx = {
      syncKey: `system:${jobId}`,
      onZoom: (lo, hi) => this.zoomTo([lo, hi]),
      onReset: () => this.zoomTo(null),
    };
    this.timingChart = new SystemChart(
      { id: "sys-timing", title: "Stage timing (s per step, stacked)", stacked: true }, ctx);
    this.timingChart.root.classList.add("wide");
    this.charts = SYSTEM_CHARTS.map((spec) => new SystemChart({ ...spec, throttles: spec.id === "sys-gpu-temp" }, ctx));
    this.charts[0].root.classList.add("wide"); // GPU utilisation, right under the stages
    this.picker = h("select", { id: "system-host", onchange: () => this.selectHost(this.picker.value) });
    this.pickerLabel = h("label", { class: "control", hidden: true }, "Host ", this.picker);
    this.info = h("span", { class: "muted", id: "system-info" });
    this.zoomButton = h("button", { hidden: true, onclick: () => this.zoomTo(null), title: "Or double-click a chart" },
      "Reset zoom");
    this.empty = h("div", { class: "panel system-empty", id: "system-empty", hidden: true }, emptyState(jobId));
    this.grid = h("div", { class: "chart-grid system-charts", hidden: true },
      this.timingChart.root, this.charts.map((chart) => chart.root));
    this.toolbar = h("div", { class: "toolbar system-toolbar", hidden: true }, this.pickerLabel, this.info, this.zoomButton);
    this.root = h("section", { class: "profile-pane system-pane", "data-tab": "system", hidden: true },
      this.toolbar, this.empty, this.grid);
  }

  start() {
    this.started = true;
    if (this.active) this.load();
  }

  stop() {
    this.stopped = true;
    this.timingChart.destroy();
    for (const chart of this.charts) chart.destroy();
  }

  /** The run page's tab changed (main.js → RunView.showTab): shown, the samples are read again. */
  showTab(tab) {
    const active = tab === "system";
    this.root.hidden = !active;
    if (active && !this.active && this.started) this.load();
    this.active = active;
  }

  /** The run's metric points (the stage timing), whenever the run page's change. */
  setColumns(columns) {
    this.columns = columns;
    if (this.active && this.loaded) this.redraw();
  }

  async load() {
    const mine = ++this.requests;
    try {
      // Which hosts: a tiny answer (one series, two points a host).
      const body = await api(`/monitoring/${enc(this.jobId)}/system?max_points=2&series=cpu.count`);
      if (mine !== this.requests || this.stopped) return;
      this.hosts = body.all_hosts;
      this.host = pickHost(this.hosts, this.host);
      this.showHosts();
      if (this.host) await this.loadHost(mine);
      else this.store = emptyStore();
      if (mine !== this.requests) return;
      this.loaded = true;
      this.draw();
    } catch (error) {
      if (mine !== this.requests) return;
      this.info.textContent = `Could not read the system samples: ${error.message}`;
      this.toolbar.hidden = false;
    }
  }

  async loadHost(mine) {
    let query = `max_points=${pointBudget()}&host=${enc(this.host)}`;
    if (this.zoom) query += `&start=${Math.max(0, this.zoom[0])}&end=${Math.max(0, this.zoom[1])}`;
    const body = await api(`/monitoring/${enc(this.jobId)}/system?${query}`);
    if (mine !== this.requests || this.stopped) return;
    const answer = body.hosts[this.host];
    this.store = storeFromAnswer(answer);
    this.answered = answer ? (answer.downsampled ? `min/max of ${answer.source}` : "every sample") : null;
    this.showCount();
  }

  /** "N points · every sample" (or the answer's buckets), kept current as live samples land. */
  showCount() {
    this.info.textContent = this.answered
      ? `${counted(this.store.times.length, "point")} · ${this.answered}`
      : "";
  }

  showHosts() {
    const options = this.hosts.map((host) => h("option", { value: host }, host));
    this.picker.replaceChildren(...options);
    if (this.host) this.picker.value = this.host;
    this.pickerLabel.hidden = this.hosts.length < 2;
  }

  selectHost(host) {
    this.host = host;
    this.store = emptyStore();
    this.load();
  }

  zoomTo(range) {
    this.zoom = range;
    this.zoomButton.hidden = !range;
    for (const chart of [this.timingChart, ...this.charts]) chart.setRange(range);
    this.load();
  }

  /** A `system` message of the live socket: a new host joins the picker; the shown one's sample is drawn. */
  onLive(message) {
    const sample = message.data;
    if (!this.active || !this.loaded || !sample) return; // read afresh when the tab is shown
    if (!this.hosts.includes(sample.host)) {
      this.hosts = [...this.hosts, sample.host].sort();
      if (!this.host) {
        this.load();
        return;
      }
      this.showHosts();
    }
    if (sample.host === this.host && appendSample(this.store, sample)) {
      this.showCount();
      this.redraw();
    }
  }

  draw() {
    if (this.stopped) return;
    const hasSamples = this.store.times.length > 0;
    this.empty.hidden = !this.loaded || this.hosts.length > 0;
    this.grid.hidden = !hasSamples;
    this.toolbar.hidden = !this.hosts.length && !this.info.textContent;
    if (!hasSamples) return;
    const timing = timingStack(this.columns);
    const range = this.zoom || timeExtent(this.store, timing && timing.store);
    if (timing) {
      const lines = timing.lines.map((line) => ({ ...line, ref: false, scale: 1 }));
      this.timingChart.update(timing.store, lines, [timing.store.times, ...timing.lines.map((line) => line.top)], range);
    } else {
      this.timingChart.update(emptyStore(), [], [[]], range);
    }
    for (const chart of this.charts) {
      const lines = chartLines(chart.spec, this.store);
      chart.update(this.store, lines, chartData(this.store, lines), range);
    }
  }
}
