// One chart of a run: uPlot underneath, fed from a `Columns` store.
//
// Each series is drawn as its (optionally smoothed) mean line plus a faint band
// from its min to its max: for exact points the band is the line itself, for
// downsampled buckets it is the envelope that keeps every spike visible. Anomalies
// and non-finite values are DOM markers laid over the plot (so they carry their
// message as a tooltip, and tests can find them); the legend below the title shows
// the values under the cursor, or the latest ones.
//
// Per chart: a log-scale toggle (remembered per chart id) and a CSV download of
// the points it holds; the x axis (steps or wall-clock time) is the board's.
// A chart with no series in a run that has points folds away (`hidden`).

import { dropNonPositive, logScaleNote } from "./axis_ticks.js";
import { logScaleWanted, resolveLines, setLogScaleWanted } from "./chart_specs.js";
import {
  anomalyMarker, csvButton, downloadCsv, logToggle, onDragSelect, yAxis, yScale, zoomCursor,
} from "./chart_tools.js";
import { fmtClock, fmtNumber, fmtStep, h } from "./format.js";
import { incidentSpan } from "./incidents.js";
import { stepOfPoint } from "./samples_logic.js";
import { mapAlong, smooth, toCsv, wallClock } from "./series.js";
import { uPlot } from "./uplot_loader.js";

// Why uPlot could not be loaded (null: it was), for main.js (uplot_loader.js).
export { chartLibraryError } from "./uplot_loader.js";

const HEIGHT = 210;
const MAX_MARKERS = 300; // per chart; beyond that a tooltip would be noise anyway

export class MetricChart {
  /**
   * @param spec  a chart spec (chart_specs.js)
   * @param ctx   {syncKey, smoothing(): number, xAxis?(): "step" | "time",
   *              onZoom(lo, hi), onReset(), onRemove?(), onPick?(step)}
   *   onPick: a click (no drag, not a double-click) on the plot, with the step of
   *   the point under the cursor (for a bucket, the step under the mouse within it).
   */
  constructor(spec, ctx) {
    this.spec = spec;
    this.ctx = ctx;
    this.columns = null;
    this.anomalies = [];
    this.range = null;
    this.runKeys = null;
    this.plot = null;
    this.signature = null;
    this.log = logScaleWanted(spec.id);
    this.xMode = "step";
    this.xs = [];
    this.legend = h("div", { class: "chart-legend" });
    this.body = h("div", { class: "chart-body" });
    this.note = h("p", { class: "chart-note muted", hidden: true });
    this.empty = h("p", { class: "chart-empty muted" }, "No data for this chart yet.");
    this.logButton = logToggle(this.log, () => this.setLog(!this.log));
    const csv = csvButton(() => this.downloadCsv());
    const remove = spec.custom && ctx.onRemove
      ? h("button", { class: "chart-remove", title: "Remove this chart", onclick: () => ctx.onRemove(spec) }, "×")
      : null;
    this.root = h("section", { class: "chart", "data-chart": spec.id },
      h("header", { class: "chart-head" }, h("h3", {}, spec.title),
        h("span", { class: "chart-tools" }, this.logButton, csv, remove)),
      this.legend, this.body, this.note, this.empty);
    this.root.chart = this; // lets tests (and a curious console) reach the plot
    this.resizer = new ResizeObserver(() => this.fit());
    this.resizer.observe(this.body);
  }

  destroy() {
    this.resizer.disconnect();
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }

  update(columns) {
    this.columns = columns;
    this.render();
  }

  setAnomalies(anomalies) {
    this.anomalies = anomalies;
    if (this.plot) this.plot.redraw(false, false);
  }

  setLog(on) {
    this.log = on;
    this.logButton.setAttribute("aria-pressed", String(on));
    setLogScaleWanted(this.spec.id, on);
    this.render();
  }

  /** Show steps [lo, hi] (null: everything). */
  setRange(range) {
    this.range = range;
    if (!this.plot) return;
    if (range) this.plot.setScale("x", this.xRange(range));
    else this.plot.setData(this.plot.data, true);
  }

  /** A step range as the x scale's {min, max} (wall-clock seconds in time mode). */
  xRange([lo, hi]) {
    const min = this.toX(lo);
    let max = this.toX(hi);
    if (!(max > min)) max = min + 1;
    return { min, max };
  }

  toX(step) {
    return this.xMode === "time" ? mapAlong(this.columns.steps, this.xs, step) : step;
  }

  toStep(x) {
    return this.xMode === "time" ? mapAlong(this.xs, this.columns.steps, x) : x;
  }

  /**
   * The series the run records at all (its whole history; null: not known). A chart
   * with none of them is hidden from the start, not left saying "no data yet".
   */
  setRunKeys(keys) {
    this.runKeys = keys;
    if (this.columns) this.render();
    else this.root.hidden = this.notInRun();
  }

  /** Whether the run, as a whole, has none of this chart's series (GPU memory on a CPU run). */
  notInRun() {
    if (!this.runKeys) return false;
    const band = this.spec.band;
    const hasBand = Boolean(band && this.runKeys.has(band.lower) && this.runKeys.has(band.upper));
    return !hasBand && resolveLines(this.spec, this.runKeys).length === 0;
  }

  render() {
    if (!this.columns) return;
    const keys = new Set(this.columns.keys());
    this.lines = resolveLines(this.spec, keys);
    const band = this.spec.band;
    this.band = band && keys.has(band.lower) && keys.has(band.upper) ? band : null;
    const hasData = this.columns.length > 0 && this.seriesKeys().some((key) => holdsData(this.columns.cols.get(key)));
    this.empty.hidden = Boolean(hasData);
    this.root.classList.toggle("is-empty", !hasData);
    // The run has points but none for this chart (GPU memory on a CPU run): fold it
    // away rather than show an empty frame. Before the first point every chart waits.
    this.root.hidden = this.notInRun() || (this.columns.length > 0 && !hasData);
    if (!hasData) {
      if (this.plot) this.plot.destroy();
      this.plot = null;
      this.signature = null;
      this.legend.replaceChildren();
      this.showNote([]);
      return;
    }
    const notes = [];
    const data = this.buildData(notes);
    this.showNote(notes);
    if (!uPlot) {
      this.body.replaceChildren(h("p", { class: "chart-missing muted" }, "No plot: the chart library did not load."));
      this.showLegend(null);
      return;
    }
    const signature = [...this.lines.map((line) => line.key), this.band ? "band" : "",
      this.xMode, this.log ? "log" : "linear"].join("|");
    if (signature !== this.signature || !this.plot) {
      if (this.plot) this.plot.destroy();
      this.signature = signature;
      this.plot = new uPlot(this.options(), data, this.body);
      this.markers = h("div", { class: "markers" });
      this.plot.over.append(this.markers);
      this.listenForPicks(this.plot);
      if (this.range) this.setRange(this.range);
    } else {
      this.plot.setData(data, !this.range);
      if (this.range) this.plot.setScale("x", this.xRange(this.range));
    }
    this.showLegend(null);
  }

  /** Every series key this chart draws (lines, then the band's two). */
  seriesKeys() {
    const keys = this.lines.map((line) => line.key);
    if (this.band) keys.push(this.band.lower, this.band.upper);
    return keys;
  }

  /** uPlot's data: x values, then the series; `notes` gets what the reader should know. */
  buildData(notes) {
    const { columns } = this;
    const weight = this.ctx.smoothing();
    this.xMode = "step";
    this.xs = columns.steps;
    if (this.ctx.xAxis && this.ctx.xAxis() === "time") {
      const clock = wallClock(columns);
      if (clock) {
        this.xMode = "time";
        this.xs = clock;
      } else {
        notes.push("No timestamps in these records: the x axis shows steps.");
      }
    }
    // One group of uPlot series per thing drawn: a line (mean, min, max), the
    // band (low, high), a stacked stage (its top).
    const groups = [];
    if (this.spec.stackPrefix) {
      // Stacked: each stage's mean on top of the ones before (sum of means is the
      // mean of sums, so buckets stack correctly too).
      let below = new Array(columns.length).fill(0);
      for (const line of this.lines) {
        const mean = smooth(columns.cols.get(line.key).mean, weight);
        const top = mean.map((value, i) => below[i] + (value ?? 0));
        groups.push([top]);
        below = top;
      }
    } else {
      for (const line of this.lines) {
        const column = columns.cols.get(line.key);
        groups.push([smooth(column.mean, weight), column.min, column.max]);
      }
      if (this.band) {
        groups.push([columns.cols.get(this.band.lower).min, columns.cols.get(this.band.upper).max]);
      }
    }
    if (!this.log) return [this.xs, ...groups.flat()];
    // A log axis cannot place values <= 0: they become gaps, counted per point.
    const positive = dropNonPositive(groups);
    const note = logScaleNote(positive.dropped);
    if (note) notes.push(note);
    return [this.xs, ...positive.groups.flat()];
  }

  showNote(notes) {
    this.note.textContent = notes.join(" ");
    this.note.hidden = notes.length === 0;
  }

  options() {
    const series = [{ label: this.xMode === "time" ? "time" : "step" }];
    const bands = [];
    if (this.spec.stackPrefix) {
      this.lines.forEach((line, i) => {
        series.push({ label: line.label, stroke: line.color, fill: `${line.color}40`, width: 1 });
        if (i > 0) bands.push({ series: [i + 1, i], fill: `${line.color}40` });
      });
    } else {
      for (const line of this.lines) {
        const at = series.length;
        series.push(
          { label: line.label, stroke: line.color, width: 1.6, spanGaps: true },
          { label: `${line.label} min`, stroke: `${line.color}55`, width: 1, spanGaps: true, points: { show: false } },
          { label: `${line.label} max`, stroke: `${line.color}55`, width: 1, spanGaps: true, points: { show: false } },
        );
        bands.push({ series: [at + 2, at + 1], fill: `${line.color}22` });
      }
      if (this.band) {
        const at = series.length;
        series.push(
          { label: `${this.band.label} low`, stroke: "#64748b88", width: 1, dash: [4, 3], spanGaps: true, points: { show: false } },
          { label: `${this.band.label} high`, stroke: "#64748b88", width: 1, dash: [4, 3], spanGaps: true, points: { show: false } },
        );
        bands.push({ series: [at + 1, at], fill: "#64748b22" });
      }
    }
    const time = this.xMode === "time";
    return {
      width: Math.max(200, this.body.clientWidth || 600),
      height: HEIGHT,
      series,
      bands,
      legend: { show: false },
      // Wall-clock x values are Unix seconds (uPlot's default time unit).
      scales: { x: { time }, y: yScale(this.log) },
      axes: [
        { values: (u, ticks) => (time ? this.clockLabels(ticks) : ticks.map(fmtStep)), size: 30 },
        yAxis(this.log),
      ],
      // A drag zooms every chart; a double-click: back to the whole run (the view
      // refetches if needed).
      cursor: zoomCursor(this.ctx),
      hooks: {
        setSelect: [onDragSelect((u, left, width) => {
          const lo = this.toStep(u.posToVal(left, "x"));
          const hi = this.toStep(u.posToVal(left + width, "x"));
          // The selection's edges are whole pixels: a step less than a pixel away
          // counts as picked (a drag from step 18's point must not zoom from 17).
          const pixel = Math.abs(this.toStep(u.posToVal(left + 1, "x")) - lo);
          this.ctx.onZoom(Math.floor(lo + pixel), Math.ceil(hi - pixel));
        })],
        setCursor: [(u) => this.showLegend(u.cursor.idx)],
        draw: [() => this.placeMarkers()],
      },
    };
  }

  /**
   * A plain click on the plot picks the point under the cursor (ctx.onPick). A drag
   * (a zoom) is not a click, and a double-click (reset zoom) cancels the pick its
   * first click started: a pick waits out the double-click time.
   */
  listenForPicks(u) {
    if (!this.ctx.onPick) return;
    let down = null;
    let timer = null;
    u.over.addEventListener("mousedown", (event) => {
      down = [event.clientX, event.clientY];
    });
    u.over.addEventListener("click", (event) => {
      clearTimeout(timer);
      const moved = down ? Math.hypot(event.clientX - down[0], event.clientY - down[1]) : 0;
      if (moved > 3 || event.detail > 1) return;
      const step = this.stepUnderCursor(u);
      if (step === null) return;
      timer = setTimeout(() => this.ctx.onPick(step), 250);
    });
    u.over.addEventListener("dblclick", () => clearTimeout(timer));
  }

  /** The step of the point the cursor is on (what the legend shows), or null. */
  stepUnderCursor(u) {
    const { columns } = this;
    if (!columns || !columns.length || u.cursor.left === null || u.cursor.left < 0) return null;
    const idx = u.cursor.idx ?? u.posToIdx(u.cursor.left);
    if (idx === null || idx === undefined || idx < 0 || idx >= columns.length) return null;
    const cursorStep = this.toStep(u.posToVal(u.cursor.left, "x"));
    return stepOfPoint(columns.steps[idx], columns.lastSteps[idx], cursorStep);
  }

  /** Tick labels of the wall-clock axis: the finer the span, the more digits. */
  clockLabels(ticks) {
    const span = ticks.length > 1 ? ticks[ticks.length - 1] - ticks[0] : 0;
    this.xTickLabels = ticks.map((t) => fmtClock(t, span));
    return this.xTickLabels;
  }

  fit() {
    if (!this.plot) return;
    const width = this.body.clientWidth;
    if (width > 0 && Math.abs(width - this.plot.width) > 1) {
      this.plot.setSize({ width, height: HEIGHT });
    }
  }

  /** The chart's points (the zoomed range only, when zoomed), raw, as a CSV file. */
  csv() {
    const columns = this.range ? this.columns.slice(this.range[0], this.range[1]) : this.columns;
    return toCsv(columns, this.seriesKeys());
  }

  downloadCsv() {
    if (!this.columns || !this.lines) return;
    downloadCsv(`${this.ctx.syncKey}_${this.spec.id}`, this.csv());
  }

  /** Legend: values at point `idx` (under the cursor), else at the latest point. */
  showLegend(idx) {
    const { columns } = this;
    if (!columns || columns.length === 0) return;
    const i = idx ?? columns.length - 1;
    const lo = columns.steps[i];
    const hi = columns.lastSteps[i];
    let where = lo === hi ? `step ${fmtStep(lo)}` : `steps ${fmtStep(lo)}–${fmtStep(hi)}`;
    const time = columns.times[i];
    if (this.xMode === "time" && time !== null && time !== undefined) where += ` · ${fmtClock(time, 0)}`;
    const items = [h("span", { class: "legend-step" }, where)];
    for (const line of this.lines) {
      const column = columns.cols.get(line.key);
      items.push(h("span", { class: "legend-item", title: line.key },
        h("i", { class: "swatch", style: `background:${line.color}` }),
        `${line.label} ${describePoint(column, i)}`));
    }
    if (this.band) {
      const low = columns.cols.get(this.band.lower).min[i];
      const high = columns.cols.get(this.band.upper).max[i];
      items.push(h("span", { class: "legend-item" }, `${this.band.label} ${fmtNumber(low)} … ${fmtNumber(high)}`));
    }
    // Only under the cursor: at rest the legend shows values, not the latest
    // incident under every chart.
    if (idx !== null && idx !== undefined) {
      for (const anomaly of this.anomalies) {
        if (anomaly.step >= lo && anomaly.step <= hi) {
          const text = `⚠ ${anomaly.type}: ${anomaly.message}`;
          items.push(h("span", { class: `legend-anomaly severity-${anomaly.severity}`, title: text }, text));
        }
      }
    }
    this.legend.replaceChildren(...items);
  }

  /** Anomaly lines and non-finite marks, positioned for the current scales. */
  placeMarkers() {
    const u = this.plot;
    if (!u || !this.markers) return;
    const { min, max } = u.scales.x;
    const { columns } = this;
    const first = columns.steps[0];
    const last = columns.lastSteps[columns.length - 1];
    const nodes = [];
    const px = (x) => `${u.valToPos(x, "x").toFixed(1)}px`;
    for (const anomaly of this.anomalies) {
      if (nodes.length >= MAX_MARKERS) break;
      // Off the data, a wall-clock position would be a guess: leave it out.
      if (this.xMode === "time" && (anomaly.step < first || anomaly.step > last)) continue;
      const [start, end] = incidentSpan(anomaly, last);
      const x0 = this.toX(start);
      const x1 = this.toX(end);
      if (x1 < min || x0 > max) continue;
      if (end > start) {
        // A shaded band from onset to end (open while it lasts); one marker at onset.
        const left = u.valToPos(Math.max(x0, min), "x");
        const right = u.valToPos(Math.min(x1, max), "x");
        nodes.push(h("div", {
          class: `incident-band severity-${anomaly.severity}${anomaly.ongoing ? " ongoing" : ""}`,
          style: `left:${left.toFixed(1)}px;width:${Math.max(1, right - left).toFixed(1)}px`,
          dataset: { step: anomaly.step, end: end, type: anomaly.type },
        }));
      }
      if (x0 >= min) nodes.push(anomalyMarker(anomaly, u.valToPos(x0, "x")));
    }
    for (let i = 0; i < columns.length && nodes.length < MAX_MARKERS; i += 1) {
      const step = columns.steps[i];
      const x = this.xs[i];
      if (x < min || x > max) continue;
      const found = this.lines.filter((line) => columns.cols.get(line.key).nf[i]);
      if (this.band) {
        for (const key of [this.band.lower, this.band.upper]) {
          if (columns.cols.get(key).nf[i]) found.push({ key, label: key });
        }
      }
      if (!found.length) continue;
      const what = found.map((line) => {
        const mark = columns.cols.get(line.key).nf[i];
        return typeof mark === "string" ? `${line.key} = ${mark}` : `${line.key}: ${mark} non-finite`;
      });
      const where = columns.lastSteps[i] === step ? `step ${fmtStep(step)}`
        : `steps ${fmtStep(step)}–${fmtStep(columns.lastSteps[i])}`;
      nodes.push(h("div", {
        class: "marker nan-marker",
        style: `left:${px(x)}`,
        title: `${where}: ${what.join(", ")}`,
        dataset: { step },
      }, "▲"));
    }
    this.markers.replaceChildren(...nodes);
  }
}

/** Whether a series has any value or non-finite mark in the points held. */
function holdsData(column) {
  if (!column) return false;
  for (let i = 0; i < column.mean.length; i += 1) {
    if (column.mean[i] !== null || column.nf[i]) return true;
  }
  return false;
}

function describePoint(column, i) {
  const mark = column.nf[i];
  const mean = column.mean[i];
  if (typeof mark === "string") return mark;
  let text = fmtNumber(mean);
  if (column.min[i] !== column.max[i]) text += ` (${fmtNumber(column.min[i])} … ${fmtNumber(column.max[i])})`;
  if (mark) text += ` +${mark} non-finite`;
  return text;
}
