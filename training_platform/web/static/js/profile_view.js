// A run's profiling views, as tabs of the run page (#/run/{job}/timing, /memory,
// /artifacts; the overview is #/run/{job}):
//
//   Timing     stages stacked per step (live, from the run's records), the stage table
//              (exact over the run from stage_times.json, else from the points held),
//              the slowest steps
//   Memory     allocated / reserved / peak per GPU and the process RSS over the run,
//              with the baseline and the leak detector's fitted trend line; the verdict
//   Artifacts  per profiled step the op table (sortable, filterable), the trace to
//              download with how to open it; the report's checks and recommendations
//
// The report comes from GET /api/jobs/{job}/profile/report (docs/contract.md), fetched
// when a tab needs it and again at most every 30 s.

import { ApiError, api, enc, token } from "./api.js";
import { MetricChart } from "./charts.js";
import { evidenceRows } from "./evidence.js";
import { counted, fmtBytes, fmtNumber, fmtStep, fmtTime, h } from "./format.js";
import {
  TABS, memoryKeys, opTable, slowestSteps, stageTableFromColumns, tabOfHash, viewOps, withReferenceLines,
} from "./profile_logic.js";

const REPORT_MAX_AGE_MS = 30_000;
const OP_ROWS_SHOWN = 200;
const GPU_FIGURES = ["allocated", "reserved", "peak"];

const seconds = (value) => (value === null || value === undefined ? "–"
  : value < 1 ? `${fmtNumber(value * 1000)} ms` : `${fmtNumber(value)} s`);
const percent = (value) => (value === null || value === undefined ? "–" : `${(value * 100).toFixed(1)} %`);

function memorySpecs() {
  const gpuLines = [];
  for (let device = 0; device < 8; device += 1) {
    for (const figure of GPU_FIGURES) {
      gpuLines.push({ key: `extra.profiling/cuda${device}/${figure}_gib`, label: `cuda:${device} ${figure}` });
    }
    gpuLines.push({ key: `ref.cuda${device}_baseline`, label: `cuda:${device} baseline` });
    gpuLines.push({ key: `ref.cuda${device}_trend`, label: `cuda:${device} trend` });
  }
  return [
    { id: "profile-gpu-memory", section: "memory", title: "GPU memory (GiB)", lines: gpuLines },
    {
      id: "profile-rss", section: "memory", title: "Process RSS (GiB)",
      lines: [
        { key: "extra.profiling/rss_gib", label: "RSS" },
        { key: "ref.rss_baseline", label: "baseline" },
        { key: "ref.rss_trend", label: "trend" },
      ],
    },
  ];
}

export class ProfileView {
  constructor(jobId) {
    this.jobId = jobId;
    this.tab = tabOfHash(window.location.hash);
    this.columns = null;
    this.report = null;
    this.reportAt = 0;
    this.loading = null;
    this.overviewParts = [];
    const ctx = (id) => ({
      syncKey: `profile:${jobId}:${id}`,
      smoothing: () => 0,
      xAxis: () => "step",
      onZoom: (lo, hi) => this.charts.forEach((chart) => chart.setRange([lo, hi])),
      onReset: () => this.charts.forEach((chart) => chart.setRange(null)),
    });
    this.timingChart = new MetricChart(
      { id: "profile-timing", section: "timing", title: "Stages per step (s, stacked)", stackPrefix: "timing." }, ctx("t"));
    this.memoryCharts = memorySpecs().map((spec) => new MetricChart(spec, ctx("m")));
    this.charts = [this.timingChart, ...this.memoryCharts];
    this.stageTable = h("div", { class: "profile-stage-table", id: "profile-stage-table" });
    this.slowest = h("div", { class: "profile-slowest", id: "profile-slowest" });
    this.memoryFacts = h("div", { class: "profile-memory-facts", id: "profile-memory-facts" });
    this.artifacts = h("div", { class: "profile-artifacts", id: "profile-artifacts" });
    this.reportBox = h("div", { class: "profile-report", id: "profile-report" });
    this.panes = {
      timing: h("section", { class: "profile-pane", "data-tab": "timing" },
        h("div", { class: "chart-grid profile-charts" }, this.timingChart.root),
        h("div", { class: "profile-columns" },
          h("div", { class: "panel" }, h("h2", {}, "Stages"), this.stageTable),
          h("div", { class: "panel" }, h("h2", {}, "Slowest steps"), this.slowest))),
      memory: h("section", { class: "profile-pane", "data-tab": "memory" },
        h("div", { class: "chart-grid profile-charts" }, this.memoryCharts.map((chart) => chart.root)),
        h("div", { class: "panel" }, h("h2", {}, "Memory and leaks"), this.memoryFacts)),
      artifacts: h("section", { class: "profile-pane", "data-tab": "artifacts" },
        h("div", { class: "panel" }, h("h2", {}, "Report and recommendations"), this.reportBox),
        h("div", { class: "panel" }, h("h2", {}, "Profiled steps"), this.artifacts)),
    };
    this.tabs = h("nav", { class: "run-tabs", "aria-label": "Run views" },
      TABS.map((tab) => h("a", {
        href: `#/run/${enc(jobId)}${tab.id ? `/${tab.id}` : ""}`, "data-tab": tab.id, class: "run-tab",
      }, tab.label)));
    this.root = h("div", { class: "profile-views" }, Object.values(this.panes));
  }

  /** The run page's own parts, hidden while another tab is on show. */
  setOverview(parts) {
    this.overviewParts = parts;
    this.showTab(this.tab);
  }

  start() {
    this.started = true;
    this.showTab(this.tab);
  }

  stop() {
    this.stopped = true;
    for (const chart of this.charts) chart.destroy();
  }

  showTab(tab) {
    this.tab = TABS.some((t) => t.id === tab) ? tab : "";
    for (const link of this.tabs.querySelectorAll("a")) {
      link.classList.toggle("active", link.dataset.tab === this.tab);
      link.setAttribute("aria-current", link.dataset.tab === this.tab ? "page" : "false");
    }
    for (const part of this.overviewParts) part.hidden = this.tab !== "";
    for (const [id, pane] of Object.entries(this.panes)) pane.hidden = id !== this.tab;
    if (!this.panes[this.tab] || !this.started) return; // the Overview, or another module's tab
    this.draw();
    this.loadReport();
    if (this.tab === "artifacts") this.loadArtifacts();
  }

  setColumns(columns) {
    this.columns = columns;
    if (this.tab === "timing" || this.tab === "memory") this.draw();
    if (this.panes[this.tab] && Date.now() - this.reportAt > REPORT_MAX_AGE_MS) this.loadReport();
  }

  draw() {
    if (!this.columns || this.stopped) return;
    if (this.tab === "timing") {
      this.timingChart.update(this.columns);
      this.renderStages();
      this.renderSlowest();
    } else if (this.tab === "memory") {
      const columns = withReferenceLines(this.columns, this.report && this.report.memory);
      for (const chart of this.memoryCharts) chart.update(columns);
      this.renderMemory();
    }
  }

  async loadReport(force = false) {
    if (this.loading || (!force && Date.now() - this.reportAt < REPORT_MAX_AGE_MS && this.report)) return;
    this.loading = api(`/jobs/${enc(this.jobId)}/profile/report`);
    try {
      this.report = await this.loading;
      this.reportAt = Date.now();
    } catch (error) {
      this.report = null;
      this.reportError = error instanceof ApiError && error.status === 503
        ? "The job's files cannot be read right now." : `No report (${error.message}).`;
    } finally {
      this.loading = null;
    }
    if (this.stopped) return;
    this.draw();
    this.renderReport();
  }

  renderStages() {
    const fromReport = this.report && this.report.breakdown && this.report.breakdown.stages.length;
    const rows = fromReport ? this.report.breakdown.stages : stageTableFromColumns(this.columns);
    if (!rows.length) {
      this.stageTable.replaceChildren(h("p", { class: "muted" },
        "No stage times: time stages with profiler.stage(...) (docs/profiling.md)."));
      return;
    }
    const note = fromReport
      ? `Exact over ${counted(this.report.breakdown.steps, "step")} (stage_times.json, ${fmtTime(this.report.updated_at)}).`
      : `From the ${fmtStep(this.columns.length)} points on the chart (no stage_times.json).`;
    const step = fromReport ? this.report.breakdown.step_time : null;
    this.stageTable.replaceChildren(h("p", { class: "muted" }, note), h("table", { class: "profile-table stages" },
      h("thead", {}, h("tr", {}, ["stage", "mean", "p50", "p95", "total", "share"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.map((row) => h("tr", { "data-stage": row.stage },
        h("td", { class: `stage depth-${Math.min(row.depth, 3)}` }, row.stage.split("/").pop()),
        h("td", {}, seconds(row.mean)), h("td", {}, seconds(row.p50)), h("td", {}, seconds(row.p95)),
        h("td", {}, seconds(row.total)),
        h("td", { class: "share" }, h("span", { class: "share-bar", style: `width:${Math.min(100, (row.share || 0) * 100).toFixed(1)}%` }),
          percent(row.share)))),
      step ? h("tr", { class: "step-row" }, h("td", {}, "whole step"), h("td", {}, seconds(step.mean)),
        h("td", {}, seconds(step.p50)), h("td", {}, seconds(step.p95)), h("td", {}, seconds(step.total)), h("td", {}, "100 %")) : "")));
  }

  renderSlowest() {
    const slow = slowestSteps(this.columns);
    if (!slow.length) {
      this.slowest.replaceChildren(h("p", { class: "muted" }, "No step times yet."));
      return;
    }
    this.slowest.replaceChildren(h("table", { class: "profile-table slowest" },
      h("thead", {}, h("tr", {}, ["step", "time", "largest stages"].map((t) => h("th", {}, t)))),
      h("tbody", {}, slow.map((item) => h("tr", { "data-step": item.step },
        h("td", {}, h("button", {
          class: "link", title: "Zoom the chart to this step",
          onclick: () => this.charts.forEach((c) => c.setRange([Math.max(0, item.step - 10), item.lastStep + 10])),
        }, item.lastStep !== item.step ? `${fmtStep(item.step)}–${fmtStep(item.lastStep)}` : fmtStep(item.step))),
        h("td", {}, seconds(item.seconds)),
        h("td", { class: "muted" }, Object.entries(item.stages).sort((a, b) => b[1] - a[1]).slice(0, 3)
          .map(([name, value]) => `${name} ${seconds(value)}`).join(" · ")))))));
  }

  renderMemory() {
    const keys = memoryKeys(this.columns.keys());
    const memory = this.report && this.report.memory;
    const parts = [];
    if (!keys.gpu.length && !keys.host.length) {
      parts.push(h("p", { class: "muted" }, "No memory figures in the records: attach the profiling kit (StepProfiler) to record them."));
    }
    if (memory) {
      parts.push(h("p", { class: `leak-verdict verdict-${memory.verdict.replace(" ", "-")}`, id: "leak-verdict" },
        `Leak detector: ${memory.verdict}`));
      const rows = Object.entries(memory.series_verdicts || {}).map(([name, v]) => h("tr", {},
        h("td", {}, name), h("td", {}, `${v.slope_mib_per_step.toFixed(3)} MiB/step`),
        h("td", {}, `${v.growth_mib.toFixed(1)} MiB over ${fmtStep(Math.round(v.steps))} steps`),
        h("td", {}, `R² ${v.r_squared.toFixed(2)}`), h("td", {}, v.leak ? "leak" : "no leak")));
      if (rows.length) parts.push(h("table", { class: "profile-table trends" }, h("tbody", {}, rows)));
      for (const leak of memory.leaks || []) {
        parts.push(h("p", { class: `leak severity-${leak.severity}` }, `step ${fmtStep(leak.step)}: ${leak.message}`));
      }
      const figures = ["baseline", "peak", "mean", "last"].filter((label) => memory[label]);
      parts.push(h("dl", { class: "facts" }, figures.flatMap((label) => [h("dt", {}, label),
        h("dd", {}, flatFigures(memory[label]))])));
    } else {
      parts.push(h("p", { class: "muted" }, this.reportError || "Loading the report…"));
    }
    this.memoryFacts.replaceChildren(...parts);
  }

  renderReport() {
    const report = this.report;
    if (!report) {
      this.reportBox.replaceChildren(h("p", { class: "muted" }, this.reportError || "Loading…"));
      return;
    }
    const problems = report.problems.map((p) => h("li", { class: "problem" }, `${p.path || "(profile)"}: ${p.problem}`));
    const recs = report.recommendations.map((rec) => h("li", { class: `recommendation severity-${rec.severity}`, "data-rule": rec.rule },
      h("span", { class: `badge severity-${rec.severity === "warning" ? "warning" : "info"}` }, rec.severity), " ",
      h("strong", {}, rec.title), h("p", {}, rec.detail),
      evidenceTable(rec.evidence)));
    const throughput = report.throughput;
    this.reportBox.replaceChildren(
      h("p", { class: report.ok ? "checks-ok" : "checks-bad", id: "profile-checks" },
        report.ok ? "Checks: the profile's files are sound." : `Checks: ${report.problems.length} problem(s).`),
      problems.length ? h("ul", { class: "problems" }, problems) : "",
      report.notes.length ? h("ul", { class: "notes muted" }, report.notes.map((n) => h("li", {}, n))) : "",
      throughput ? h("p", {}, `Throughput: ${fmtNumber(throughput.samples_per_second)} samples/s, ${fmtNumber(throughput.tokens_per_second)} tokens/s.`) : "",
      h("h3", {}, `Recommendations (${recs.length})`),
      recs.length ? h("ul", { class: "recommendations" }, recs) : h("p", { class: "muted" }, "None: no rule fired."),
      h("p", { class: "muted" }, "The same report on the command line: training-platform profile-report <profiles folder>."));
  }

  async loadArtifacts() {
    if (this.artifactsLoaded) return;
    this.artifactsLoaded = true;
    let listing;
    try {
      listing = await api(`/jobs/${enc(this.jobId)}/artifacts`);
    } catch (error) {
      this.artifactsLoaded = false;
      this.artifacts.replaceChildren(h("p", { class: "muted" }, `Artifacts unavailable (${error.message}).`));
      return;
    }
    if (!listing.profiles.length) {
      this.artifacts.replaceChildren(h("p", { class: "muted" },
        "No profiled steps: give StepProfiler a TraceSchedule to record torch.profiler traces."));
    } else {
      this.artifacts.replaceChildren(...listing.profiles.slice().reverse().map((run) => this.profileSection(run)));
    }
    const loose = listing.files.filter((file) => file.step === null);
    if (loose.length) {
      this.artifacts.append(h("div", { class: "profile-files" }, h("h3", {}, "Run-wide files"),
        h("ul", {}, loose.map((file) => h("li", {}, downloadLink(this.jobId, file), " ",
          h("span", { class: "muted" }, fmtBytes(file.size)))))));
    }
  }

  profileSection(run) {
    const trace = run.files.find((file) => file.path.endsWith("/trace.json"));
    const ops = run.files.find((file) => file.path.endsWith("/op_stats.csv"));
    const tableBox = h("div", { class: "op-table-box" }, ops ? h("p", { class: "muted" }, "Loading the op table…")
      : h("p", { class: "muted" }, "No op_stats.csv in this profile."));
    const section = h("section", { class: "profile-step", "data-step": run.step },
      h("h3", {}, `${run.name} (step ${fmtStep(run.step)})`),
      trace ? h("p", { class: "trace-download" }, downloadLink(this.jobId, trace, "Download trace.json"),
        ` (${fmtBytes(trace.size)}): open it in `, h("a", { href: "https://ui.perfetto.dev", target: "_blank", rel: "noopener" }, "Perfetto"),
        " (Open trace file) or in chrome://tracing (Load).") : h("p", { class: "muted" }, "No trace.json."),
      tableBox);
    if (ops) this.loadOps(ops, tableBox);
    return section;
  }

  async loadOps(file, box) {
    let text;
    try {
      text = await fetchText(artifactUrl(this.jobId, file.path));
    } catch (error) {
      box.replaceChildren(h("p", { class: "error-text" }, `op_stats.csv could not be read (${error.message}).`));
      return;
    }
    const table = opTable(text);
    const state = { filter: "", column: table.columns.includes("self_cuda_time_ms") ? "self_cuda_time_ms" : "self_time_ms", descending: true };
    const body = h("tbody");
    const count = h("span", { class: "muted op-count" });
    const heads = table.columns.map((name) => h("th", {
      "data-column": name, class: "sortable", title: "Sort by this column",
      onclick: () => {
        state.descending = state.column === name ? !state.descending : name !== "op_name";
        state.column = name;
        render();
      },
    }, name));
    const render = () => {
      const rows = viewOps(table.rows, state);
      for (const th of heads) {
        th.dataset.sorted = th.dataset.column === state.column ? (state.descending ? "desc" : "asc") : "";
      }
      body.replaceChildren(...rows.slice(0, OP_ROWS_SHOWN).map((row) => h("tr", {},
        table.columns.map((name) => h("td", { class: name === "op_name" ? "op" : "num" },
          typeof row[name] === "number" ? fmtNumber(row[name]) : row[name])))));
      count.textContent = `${Math.min(rows.length, OP_ROWS_SHOWN)} of ${counted(rows.length, "operator")} shown`;
    };
    const filter = h("input", {
      type: "search", class: "op-filter", placeholder: "Filter operators", "aria-label": "Filter operators",
      oninput: () => { state.filter = filter.value; render(); },
    });
    box.replaceChildren(h("div", { class: "op-tools" }, filter, " ", count, " ", downloadLink(this.jobId, file, "op_stats.csv")),
      h("div", { class: "op-scroll" }, h("table", { class: "profile-table op-table" }, h("thead", {}, h("tr", {}, heads)), body)));
    render();
  }
}

/** A recommendation's evidence as a small key / value table (evidence.js), not JSON. */
function evidenceTable(evidence) {
  const rows = evidenceRows(evidence);
  if (!rows.length) return "";
  return h("table", { class: "evidence" }, h("caption", {}, "Evidence"),
    h("tbody", {}, rows.map(([key, text]) => h("tr", {}, h("th", { scope: "row" }, key), h("td", {}, text)))));
}

function flatFigures(figures) {
  return Object.entries(figures).flatMap(([key, value]) => (typeof value === "object" && value
    ? Object.entries(value).map(([name, v]) => `${key} ${name.replace(/_gib$/, "")} ${fmtNumber(v)} GiB`)
    : [`${key.replace(/_gib$/, "")} ${fmtNumber(value)} GiB`])).join(" · ");
}

function artifactUrl(jobId, path) {
  return `/api/jobs/${enc(jobId)}/artifacts/${path.split("/").map(enc).join("/")}`;
}

function downloadLink(jobId, file, label = file.path) {
  return h("a", {
    href: artifactUrl(jobId, file.path), class: "artifact-link", download: file.path.split("/").pop(),
    onclick: async (event) => {
      if (!token()) return; // a plain link cannot carry the Bearer header
      event.preventDefault();
      const blob = await (await fetch(event.currentTarget.href, { headers: { Authorization: `Bearer ${token()}` } })).blob();
      const url = URL.createObjectURL(blob);
      h("a", { href: url, download: file.path.split("/").pop() }).click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    },
  }, label);
}

async function fetchText(url) {
  const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
  const response = await fetch(url, { headers });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return response.text();
}
