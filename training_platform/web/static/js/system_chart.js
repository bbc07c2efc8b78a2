// One chart of the System tab: uPlot on a wall-clock x axis, shared by every chart
// of the tab (the view sets one x range on all; the cursor is synced by time).
// Lines are system_logic.js's (a colour per GPU, dashed references); a downsampled
// answer is drawn as each line's min and max with the band between them. The
// legend shows the time and training step of the point under the cursor (else the
// latest) and each line's value there.

import { yAxis, yScale, zoomCursor, zoomToSelection } from "./chart_tools.js";
import { fmtClock, h } from "./format.js";
import { pointPlace, pointValue, throttlesAt } from "./system_logic.js";
import { uPlot } from "./uplot_loader.js";

const HEIGHT = 190;

export class SystemChart {
  /**
   * @param spec {id, title, stacked?, throttles?}
   * @param ctx  {syncKey, onZoom(lo, hi) in Unix seconds, onReset()}
   */
  constructor(spec, ctx) {
    this.spec = spec;
    this.ctx = ctx;
    this.plot = null;
    this.signature = null;
    this.store = null;
    this.lines = [];
    this.range = null;
    this.legend = h("div", { class: "chart-legend" });
    this.body = h("div", { class: "chart-body" });
    this.root = h("section", { class: "chart system-chart", "data-chart": spec.id, hidden: true },
      h("header", { class: "chart-head" }, h("h3", {}, spec.title)), this.legend, this.body);
    this.root.chart = this; // lets tests reach the plot
    this.resizer = new ResizeObserver(() => this.fit());
    this.resizer.observe(this.body);
  }

  destroy() {
    this.resizer.disconnect();
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }

  /** Draw `data` ([times, ...series]) of `lines` from `store`, over x `range` [lo, hi]. */
  update(store, lines, data, range) {
    this.store = store;
    this.lines = lines;
    this.range = range;
    this.root.hidden = !lines.length || !store.times.length;
    if (this.root.hidden) {
      if (this.plot) this.plot.destroy();
      this.plot = null;
      this.signature = null;
      return;
    }
    if (!uPlot) {
      this.body.replaceChildren(h("p", { class: "chart-missing muted" }, "No plot: the chart library did not load."));
      this.showLegend(null);
      return;
    }
    const signature = [...lines.map((line) => `${line.key}:${line.ref}`), store.downsampled].join("|");
    if (signature !== this.signature || !this.plot) {
      if (this.plot) this.plot.destroy();
      this.signature = signature;
      this.plot = new uPlot(this.options(), data, this.body);
    } else {
      this.plot.setData(data, false);
    }
    this.applyRange();
    this.showLegend(null);
  }

  setRange(range) {
    this.range = range;
    this.applyRange();
  }

  applyRange() {
    if (this.plot && this.range) this.plot.setScale("x", { min: this.range[0], max: this.range[1] });
  }

  /** The number of drawn points (tests read it). */
  get points() {
    return this.store ? this.store.times.length : 0;
  }

  options() {
    const series = [{ label: "time" }];
    const bands = [];
    for (const line of this.lines) {
      if (this.spec.stacked) {
        series.push({ label: line.label, stroke: line.color, fill: `${line.color}40`, width: 1 });
        if (series.length > 2) bands.push({ series: [series.length - 1, series.length - 2], fill: `${line.color}40` });
      } else if (line.ref) {
        series.push({ label: line.label, stroke: line.color, width: 1, dash: [5, 4], spanGaps: true, points: { show: false } });
      } else if (this.store.downsampled) {
        series.push({ label: `${line.label} min`, stroke: line.color, width: 1, spanGaps: true, points: { show: false } },
          { label: `${line.label} max`, stroke: line.color, width: 1, spanGaps: true, points: { show: false } });
        bands.push({ series: [series.length - 1, series.length - 2], fill: `${line.color}30` });
      } else {
        series.push({ label: line.label, stroke: line.color, width: 1.6, spanGaps: true });
      }
    }
    return {
      width: Math.max(200, this.body.clientWidth || 600),
      height: HEIGHT,
      series,
      bands,
      legend: { show: false },
      scales: {
        x: { time: true, range: (u, min, max) => this.range || [min, max] },
        // From 0 (an idle GPU is a line on the floor), a little headroom above the highest.
        y: { ...yScale(false), range: (u, min, max) => [Math.min(0, min ?? 0), max > 0 ? max * 1.05 : 1] },
      },
      axes: [
        { values: (u, ticks) => clockLabels(ticks), size: 30 },
        yAxis(false),
      ],
      // No horizontal line: at the same height on charts of other units it means nothing.
      cursor: zoomCursor(this.ctx, { y: false }),
      hooks: {
        setSelect: [zoomToSelection(this.ctx)],
        setCursor: [(u) => this.showLegend(u.cursor.idx)],
      },
    };
  }

  fit() {
    if (!this.plot) return;
    const width = this.body.clientWidth;
    if (width > 0 && Math.abs(width - this.plot.width) > 1) this.plot.setSize({ width, height: HEIGHT });
  }

  /** The time and step of point `idx` (under the cursor; else the latest) and the values there. */
  showLegend(idx) {
    const { store } = this;
    if (!store || !store.times.length) return;
    const i = idx ?? store.times.length - 1;
    if (i < 0 || i >= store.times.length) return;
    const items = [h("span", { class: "legend-step" }, pointPlace(store, i))];
    for (const line of this.lines) {
      items.push(h("span", { class: `legend-item${line.ref ? " legend-ref" : ""}`, title: line.key },
        h("i", { class: "swatch", style: `background:${line.color}` }), `${line.label} ${pointValue(store, line, i)}`));
    }
    if (this.spec.throttles) {
      for (const text of throttlesAt(store, i)) {
        items.push(h("span", { class: "legend-anomaly severity-warning" }, `⚠ ${text} throttling`));
      }
    }
    this.legend.replaceChildren(...items);
  }
}

function clockLabels(ticks) {
  const span = ticks.length > 1 ? ticks[ticks.length - 1] - ticks[0] : 0;
  return ticks.map((t) => fmtClock(t, span));
}
