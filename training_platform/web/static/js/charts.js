// One chart of a run: uPlot underneath, fed from a `Columns` store.
//
// Each series is drawn as its (optionally smoothed) mean line plus a faint band
// from its min to its max: for exact points the band is the line itself, for
// downsampled buckets it is the envelope that keeps every spike visible. Anomalies
// and non-finite values are DOM markers laid over the plot (so they carry their
// message as a tooltip, and tests can find them); the legend below the title shows
// the values under the cursor, or the latest ones.

import uPlot from "/static/vendor/uplot/uPlot.esm.js";
import { resolveLines } from "./chart_specs.js";
import { fmtNumber, fmtStep, h } from "./format.js";
import { smooth } from "./series.js";

const HEIGHT = 210;
const MAX_MARKERS = 300; // per chart; beyond that a tooltip would be noise anyway

export class MetricChart {
  /**
   * @param spec  a chart spec (chart_specs.js)
   * @param ctx   {syncKey, smoothing(): number, onZoom(lo, hi), onReset(), onRemove?()}
   */
  constructor(spec, ctx) {
    this.spec = spec;
    this.ctx = ctx;
    this.columns = null;
    this.anomalies = [];
    this.range = null;
    this.plot = null;
    this.signature = null;
    this.legend = h("div", { class: "chart-legend" });
    this.body = h("div", { class: "chart-body" });
    this.empty = h("p", { class: "chart-empty muted" }, "No data for this chart yet.");
    const remove = spec.custom && ctx.onRemove
      ? h("button", { class: "chart-remove", title: "Remove this chart", onclick: () => ctx.onRemove(spec) }, "×")
      : null;
    this.root = h("section", { class: "chart", "data-chart": spec.id },
      h("header", { class: "chart-head" }, h("h3", {}, spec.title), remove),
      this.legend, this.body, this.empty);
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

  /** Show steps [lo, hi] (null: everything). */
  setRange(range) {
    this.range = range;
    if (!this.plot) return;
    if (range) this.plot.setScale("x", { min: range[0], max: range[1] });
    else this.plot.setData(this.plot.data, true);
  }

  render() {
    if (!this.columns) return;
    const keys = new Set(this.columns.keys());
    this.lines = resolveLines(this.spec, keys);
    const band = this.spec.band;
    this.band = band && keys.has(band.lower) && keys.has(band.upper) ? band : null;
    const hasData = this.columns.length > 0 && (this.lines.length > 0 || this.band);
    this.empty.hidden = Boolean(hasData);
    this.root.classList.toggle("is-empty", !hasData);
    if (!hasData) {
      if (this.plot) this.plot.destroy();
      this.plot = null;
      this.signature = null;
      this.legend.replaceChildren();
      return;
    }
    const data = this.buildData();
    const signature = this.lines.map((line) => line.key).join("|") + (this.band ? "|band" : "");
    if (signature !== this.signature || !this.plot) {
      if (this.plot) this.plot.destroy();
      this.signature = signature;
      this.plot = new uPlot(this.options(), data, this.body);
      this.markers = h("div", { class: "markers" });
      this.plot.over.append(this.markers);
      if (this.range) this.setRange(this.range);
    } else {
      this.plot.setData(data, !this.range);
      if (this.range) this.plot.setScale("x", { min: this.range[0], max: this.range[1] });
    }
    this.showLegend(null);
  }

  buildData() {
    const { columns } = this;
    const weight = this.ctx.smoothing();
    const data = [columns.steps];
    if (this.spec.stackPrefix) {
      // Stacked: each stage's mean on top of the ones before (sum of means is the
      // mean of sums, so buckets stack correctly too).
      let below = new Array(columns.length).fill(0);
      for (const line of this.lines) {
        const mean = smooth(columns.cols.get(line.key).mean, weight);
        const top = mean.map((value, i) => below[i] + (value ?? 0));
        data.push(top);
        below = top;
      }
      return data;
    }
    for (const line of this.lines) {
      const column = columns.cols.get(line.key);
      data.push(smooth(column.mean, weight), column.min, column.max);
    }
    if (this.band) {
      data.push(columns.cols.get(this.band.lower).min, columns.cols.get(this.band.upper).max);
    }
    return data;
  }

  options() {
    const series = [{ label: "step" }];
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
    return {
      width: Math.max(200, this.body.clientWidth || 600),
      height: HEIGHT,
      series,
      bands,
      legend: { show: false },
      scales: { x: { time: false } },
      axes: [
        { values: (u, ticks) => ticks.map(fmtStep), size: 30 },
        { values: (u, ticks) => ticks.map(fmtNumber), size: 62 },
      ],
      cursor: {
        sync: { key: this.ctx.syncKey },
        // A drag selects a range; we zoom all charts ourselves (setSelect below), so
        // only a user's drag counts as a zoom, never uPlot's own scale updates.
        drag: { x: true, y: false, setScale: false },
        bind: {
          // Double-click: back to the whole run (the view refetches if needed).
          dblclick: () => () => {
            this.ctx.onReset();
            return null;
          },
        },
      },
      hooks: {
        setSelect: [(u) => {
          const { left, width } = u.select;
          if (width < 2) return;
          const lo = u.posToVal(left, "x");
          const hi = u.posToVal(left + width, "x");
          u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          this.ctx.onZoom(Math.floor(lo), Math.ceil(hi));
        }],
        setCursor: [(u) => this.showLegend(u.cursor.idx)],
        draw: [() => this.placeMarkers()],
      },
    };
  }

  fit() {
    if (!this.plot) return;
    const width = this.body.clientWidth;
    if (width > 0 && Math.abs(width - this.plot.width) > 1) {
      this.plot.setSize({ width, height: HEIGHT });
    }
  }

  /** Legend: values at point `idx` (under the cursor), else at the latest point. */
  showLegend(idx) {
    const { columns } = this;
    if (!columns || columns.length === 0) return;
    const i = idx ?? columns.length - 1;
    const lo = columns.steps[i];
    const hi = columns.lastSteps[i];
    const items = [h("span", { class: "legend-step" },
      lo === hi ? `step ${fmtStep(lo)}` : `steps ${fmtStep(lo)}–${fmtStep(hi)}`)];
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
    for (const anomaly of this.anomalies) {
      if (anomaly.step >= lo && anomaly.step <= hi) {
        items.push(h("span", { class: `legend-anomaly severity-${anomaly.severity}` },
          `⚠ ${anomaly.type}: ${anomaly.message}`));
      }
    }
    this.legend.replaceChildren(...items);
  }

  /** Anomaly lines and non-finite marks, positioned for the current scales. */
  placeMarkers() {
    const u = this.plot;
    if (!u || !this.markers) return;
    const { min, max } = u.scales.x;
    const nodes = [];
    const x = (step) => `${u.valToPos(step, "x").toFixed(1)}px`;
    for (const anomaly of this.anomalies) {
      if (nodes.length >= MAX_MARKERS) break;
      if (anomaly.step < min || anomaly.step > max) continue;
      nodes.push(h("div", {
        class: `marker anomaly-marker severity-${anomaly.severity}`,
        style: `left:${x(anomaly.step)}`,
        title: `step ${fmtStep(anomaly.step)} · ${anomaly.severity} · ${anomaly.type}: ${anomaly.message}`,
        dataset: { step: anomaly.step, type: anomaly.type },
      }));
    }
    const { columns } = this;
    for (let i = 0; i < columns.length && nodes.length < MAX_MARKERS; i += 1) {
      const step = columns.steps[i];
      if (step < min || step > max) continue;
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
        style: `left:${x(step)}`,
        title: `${where}: ${what.join(", ")}`,
        dataset: { step },
      }, "▲"));
    }
    this.markers.replaceChildren(...nodes);
  }
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
