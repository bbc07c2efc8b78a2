// One chart of the Compare view: one metric, a line per run (uPlot underneath).
//
// Each run is drawn as its line (the server's smoothed values when the comparison is
// smoothed, else the mean) over a faint band from its raw min to its max, which stays
// visible behind the smoothed line: for exact points the band's edges are the raw
// line itself, for downsampled buckets the envelope that keeps every spike. All the
// bands are drawn first, then all the lines, so no run's band hides another's line.
// The legend under the plot names each run with its value at the x under the cursor
// (each run's nearest point, compare_logic.js), or its latest value.
//
// The header has the run page's controls (chart_tools.js): a log y axis (remembered
// per metric, as `compare:<key>`), a CSV of what the chart shows, and each run's
// anomalies as markers coloured by severity, with the run's colour on the flag.
//
// During the view's replay (compare_replay.js) the chart shows each run only up to
// the replay's x, and only the anomalies reached: uPlot gets the first points of its
// columns, in the frame (x and y scales) of the whole data, so the lines grow into a
// frame that does not move; without a replay, the whole data again.

import { dropNonPositive, logScaleNote } from "./axis_ticks.js";
import { logScaleWanted, seriesTitle, setLogScaleWanted } from "./chart_specs.js";
import {
  anomalyMarker, csvButton, downloadCsv, logToggle, yAxis, yScale, zoomCursor, zoomToSelection,
} from "./chart_tools.js";
import { anomalyXs, compareCsv } from "./compare_controls.js";
import {
  fmtCount, fmtDuration, lastPoint, mergeRuns, nearestPoint,
} from "./compare_logic.js";
import { cutData, cutMerged, prefixLength, reachedAnomalies } from "./compare_replay_logic.js";
import { fmtNumber, fmtStep, h } from "./format.js";
import { swatch } from "./run_labels.js";
import { uPlot } from "./uplot_loader.js";

const HEIGHT = 230;
const MAX_MARKERS = 300; // per chart, all runs together
const X_LABELS = { step: "step", time: "time since start", tokens: "tokens" };

/** An x value as the axis and legend write it. */
export function fmtX(mode, value) {
  if (mode === "time") return fmtDuration(value);
  if (mode === "tokens") return fmtCount(value);
  return fmtStep(value);
}

export class CompareChart {
  /**
   * @param key  the series ("group.field")
   * @param ctx  {syncKey, xMode(): "step" | "time" | "tokens", smoothed(): boolean,
   *              anomalies(jobId): [{step, severity, type, message, ...}],
   *              replay(): the replay's x, or null (no replay: everything shown),
   *              onZoom(lo, hi), onReset(), onRemove(key)}
   */
  constructor(key, ctx) {
    this.key = key;
    this.ctx = ctx;
    this.runs = [];
    this.merged = null;
    this.shown = null; // merged, or its part the replay has reached (the legend's)
    this.full = null; // uPlot's columns of the whole data
    this.cutKey = null; // what the replay cut last drew (null: the whole data)
    this.frame = null; // the whole data's scales, kept while the replay draws a part
    this.plot = null;
    this.signature = null;
    this.range = null;
    this.log = logScaleWanted(`compare:${key}`);
    this.logButton = logToggle(this.log, () => this.setLog(!this.log));
    this.body = h("div", { class: "chart-body" });
    this.legend = h("div", { class: "cmp-legend" });
    this.note = h("p", { class: "chart-note muted", hidden: true });
    this.notes = { absent: null, log: null };
    this.empty = h("p", { class: "chart-empty muted", hidden: true }, "No run has values of this metric.");
    this.root = h("section", { class: "chart cmp-chart", "data-key": key },
      h("header", { class: "chart-head" },
        h("h3", { title: key }, seriesTitle(key), " ", h("span", { class: "chart-key muted" }, key)),
        h("span", { class: "chart-tools" }, this.logButton, csvButton(() => this.downloadCsv()),
          h("button", { class: "chart-remove", title: "Remove this chart", "aria-label": `Remove chart ${key}`,
            onclick: () => ctx.onRemove(key) }, "×"))),
      this.body, this.legend, this.note, this.empty);
    this.root.chart = this; // lets tests (and a curious console) reach the plot
    this.resizer = new ResizeObserver(() => this.fit());
    this.resizer.observe(this.body);
  }

  destroy() {
    this.resizer.disconnect();
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }

  /** Draw `runs` (each with jobId, label, color and its column store). */
  update(runs) {
    this.runs = runs;
    this.merged = mergeRuns(runs, this.key);
    this.shown = this.merged;
    this.cutKey = null;
    this.frame = null;
    const absent = runs.filter((run, r) => !this.merged.perRun[r].present.length);
    this.notes = { absent: absent.length ? `Not logged by ${absent.map((run) => run.label).join(", ")}.` : null, log: null };
    this.showNote();
    const hasData = this.merged.xs.length > 0;
    this.empty.hidden = hasData;
    if (!hasData || !uPlot) {
      if (this.plot) this.plot.destroy();
      this.plot = null;
      this.signature = null;
      this.body.replaceChildren(...(hasData ? [h("p", { class: "chart-missing muted" },
        "No plot: the chart library did not load.")] : []));
      this.showReplay();
      return;
    }
    const data = this.data();
    this.full = data;
    const signature = [this.ctx.xMode(), this.log ? "log" : "linear",
      ...runs.map((run) => `${run.jobId}:${run.color}`)].join("|");
    if (signature !== this.signature || !this.plot) {
      if (this.plot) this.plot.destroy();
      this.plot = null;
      this.body.replaceChildren();
      this.signature = signature;
      this.plot = new uPlot(this.options(), data, this.body);
      this.markers = h("div", { class: "markers" });
      this.head = h("div", { class: "replay-head", hidden: true }); // the replay's x
      this.plot.over.append(this.markers, this.head);
      if (this.range) this.setRange(this.range);
    } else {
      this.plot.setData(data, !this.range);
      if (this.range) this.plot.setScale("x", { min: this.range[0], max: this.range[1] });
    }
    this.showReplay();
  }

  /**
   * Draw what the replay has reached (`ctx.replay()`, its x), or everything when no
   * replay runs. Cheap when nothing new was reached: called on every frame of a replay.
   */
  showReplay() {
    if (!this.merged) return;
    const position = this.ctx.replay ? this.ctx.replay() : null;
    this.placeHead(position);
    if (position === null) {
      if (this.cutKey === null) {
        this.showLegend(null);
        return;
      }
      this.cutKey = null;
      this.frame = null;
      this.shown = this.merged;
      if (this.plot) {
        this.plot.setData(this.full, !this.range);
        if (this.range) this.plot.setScale("x", { min: this.range[0], max: this.range[1] });
      }
      this.showLegend(null);
      return;
    }
    const k = prefixLength(this.merged.xs, position);
    const key = `${k}:${this.reachedCount(position)}`;
    if (key === this.cutKey) return;
    this.cutKey = key;
    this.shown = cutMerged(this.merged, k);
    const u = this.plot;
    if (u) {
      if (!this.frame) {
        // The whole data drawn once (not painted: the same task draws the part), for its scales.
        u.batch(() => {
          u.setData(this.full, !this.range);
          if (this.range) u.setScale("x", { min: this.range[0], max: this.range[1] });
        });
        this.frame = { x: [u.scales.x.min, u.scales.x.max], y: [u.scales.y.min, u.scales.y.max] };
      }
      const [xMin, xMax] = this.frame.x;
      const [yMin, yMax] = this.frame.y;
      u.batch(() => {
        u.setData(cutData(this.full, k), false);
        u.setScale("x", { min: xMin, max: xMax });
        if (yMin !== null && yMax !== null) u.setScale("y", { min: yMin, max: yMax });
      });
    }
    this.showLegend(null);
  }

  /** The replay's x as a thin line over the plot (moves every frame, between points too). */
  placeHead(position) {
    if (!this.plot || !this.head) return;
    const { min, max } = this.plot.scales.x;
    const inside = position !== null && position >= min && position <= max;
    this.head.hidden = !inside;
    if (inside) this.head.style.left = `${this.plot.valToPos(position, "x").toFixed(1)}px`;
  }

  /** How many anomalies of the chart's runs the replay has reached at `position`. */
  reachedCount(position) {
    if (!this.ctx.anomalies) return 0;
    const mode = this.ctx.xMode();
    let n = 0;
    for (const run of this.runs) {
      n += reachedAnomalies(anomalyXs(run, this.ctx.anomalies(run.jobId), mode), position).length;
    }
    return n;
  }

  /**
   * uPlot's data: x, then every run's min and max (the bands), then every run's
   * line; on a log axis without the values <= 0 (the line under the chart says how many).
   */
  data() {
    const { xs } = this.merged;
    let groups = this.merged.perRun.map((run) => [run.line, run.min, run.max]);
    let note = null;
    if (this.log) {
      const positive = dropNonPositive(groups);
      groups = positive.groups;
      note = logScaleNote(positive.dropped);
    }
    this.notes.log = note;
    this.showNote();
    return [xs, ...groups.flatMap(([, min, max]) => [min, max]), ...groups.map(([line]) => line)];
  }

  showNote() {
    const text = [this.notes.absent, this.notes.log].filter(Boolean).join(" ");
    this.note.textContent = text;
    this.note.hidden = !text;
  }

  setLog(on) {
    this.log = on;
    this.logButton.setAttribute("aria-pressed", String(on));
    setLogScaleWanted(`compare:${this.key}`, on);
    this.update(this.runs);
  }

  /** The CSV of what the chart shows (the zoomed x range only, when zoomed). */
  csv() {
    return compareCsv(this.shown, this.runs, {
      mode: this.ctx.xMode(), smoothed: this.ctx.smoothed(), range: this.range,
    });
  }

  downloadCsv() {
    if (this.shown) downloadCsv(`compare_${this.key}`, this.csv());
  }

  /** Redraw the anomaly markers (the view learnt of new anomalies). */
  showAnomalies() {
    this.cutKey = this.cutKey === null ? null : "stale"; // a replay's count of reached ones changed
    if (this.plot) this.placeMarkers();
  }

  /** Each run's anomalies in the visible x range, as markers over the plot. */
  placeMarkers() {
    const u = this.plot;
    if (!u || !this.markers || !this.ctx.anomalies) return;
    const { min, max } = u.scales.x;
    const mode = this.ctx.xMode();
    const position = this.ctx.replay ? this.ctx.replay() : null;
    const nodes = [];
    for (const run of this.runs) {
      const placed = anomalyXs(run, this.ctx.anomalies(run.jobId), mode);
      for (const { x, anomaly } of reachedAnomalies(placed, position)) {
        if (nodes.length >= MAX_MARKERS) break;
        if (x < min || x > max) continue;
        nodes.push(anomalyMarker(anomaly, u.valToPos(x, "x"), {
          prefix: `${run.label} · `, style: `--run-color:${run.color}`, dataset: { job: run.jobId },
        }));
      }
    }
    this.markers.replaceChildren(...nodes);
  }

  options() {
    const runs = this.runs;
    const mode = this.ctx.xMode();
    const series = [{ label: X_LABELS[mode] }];
    const bands = [];
    runs.forEach((run, r) => {
      series.push(
        { label: `${run.label} min`, stroke: `${run.color}55`, width: 1, spanGaps: true, points: { show: false } },
        { label: `${run.label} max`, stroke: `${run.color}55`, width: 1, spanGaps: true, points: { show: false } },
      );
      bands.push({ series: [2 + 2 * r, 1 + 2 * r], fill: `${run.color}22` });
    });
    for (const run of runs) series.push({ label: run.label, stroke: run.color, width: 1.8, spanGaps: true });
    return {
      width: Math.max(200, this.body.clientWidth || 600),
      height: HEIGHT,
      series,
      bands,
      legend: { show: false },
      scales: { x: { time: false }, y: yScale(this.log) },
      axes: [
        { values: (u, ticks) => ticks.map((value) => fmtX(mode, value)), size: 30 },
        yAxis(this.log),
      ],
      // A drag zooms every chart (the view does it); a double-click shows it all.
      cursor: zoomCursor(this.ctx),
      hooks: {
        setSelect: [zoomToSelection(this.ctx)],
        // The x of the data point nearest the mouse (uPlot's cursor.idx), not the
        // mouse's own x: "step 14", never "step 14.5".
        setCursor: [(u) => {
          const idx = u.cursor.idx;
          const off = u.cursor.left === null || u.cursor.left < 0 || idx === null || idx === undefined;
          this.showLegend(off ? null : u.data[0][idx]);
        }],
        draw: [() => {
          this.placeMarkers();
          this.placeHead(this.ctx.replay ? this.ctx.replay() : null);
        }],
      },
    };
  }

  /** Show x in [lo, hi] (null: everything). */
  setRange(range) {
    this.range = range;
    if (!this.plot) return;
    if (this.cutKey !== null) {
      // Replaying: the frame of the whole data in the new range, then the part reached.
      this.frame = null;
      this.cutKey = "stale";
      this.showReplay();
      return;
    }
    if (range) this.plot.setScale("x", { min: range[0], max: range[1] });
    else this.plot.setData(this.plot.data, true);
  }

  fit() {
    if (!this.plot) return;
    const width = this.body.clientWidth;
    if (width > 0 && Math.abs(width - this.plot.width) > 1) this.plot.setSize({ width, height: HEIGHT });
  }

  /**
   * The legend at `x` (the cursor's x; null: each run's latest point, or the last one
   * the replay reached): each run that has the metric, with its line's value and,
   * when smoothed, the raw value or range.
   */
  showLegend(x) {
    const merged = this.shown;
    if (!merged) return;
    const mode = this.ctx.xMode();
    const smoothed = this.ctx.smoothed();
    const items = [h("span", { class: "cmp-legend-x" },
      x === null ? (this.cutKey === null ? "latest" : "replay") : `${X_LABELS[mode]} ${fmtX(mode, x)}`)];
    this.runs.forEach((run, r) => {
      const points = merged.perRun[r];
      if (!points.present.length) return;
      const i = x === null ? lastPoint(merged, r) : nearestPoint(merged, r, x);
      let text = "–";
      if (i !== null) {
        const raw = points.min[i] === points.max[i] ? fmtNumber(points.min[i])
          : `${fmtNumber(points.min[i])} … ${fmtNumber(points.max[i])}`;
        text = smoothed ? `${fmtNumber(points.line[i])} (raw ${raw})` : raw;
        if (!smoothed && points.min[i] !== points.max[i]) text = `${fmtNumber(points.line[i])} (${raw})`;
      }
      const where = i === null ? "" : ` at ${fmtX(mode, merged.xs[i])}`;
      items.push(h("span", { class: "cmp-legend-item", "data-job": run.jobId, title: `${run.jobId}${where}` },
        swatch(run.color), h("span", { class: "cmp-legend-label" }, run.label), " ",
        h("span", { class: "cmp-legend-value" }, text)));
    });
    this.legend.replaceChildren(...items);
  }
}
