// The grid of charts of a run (used by the run view and the playback view): the
// fixed charts by section, the user's added charts, a smoothing control, and one
// x-range shared by all charts (zooming one zooms all).

import {
  CHARTS, SECTIONS, X_AXES, claimedKeys, customSpec, saveXAxis, savedXAxis,
} from "./chart_specs.js";
import { MetricChart } from "./charts.js";
import { frameThrottle, h } from "./format.js";
import { MetricPicker } from "./metric_picker.js";

export class ChartBoard {
  /**
   * @param options {syncKey, storageKey?, onZoom?(lo, hi), onReset?(), onPick?(step)}
   *   storageKey: where the user's added charts are remembered (localStorage).
   *   onPick: a click on a point of any chart, with its step (charts.js).
   */
  constructor({ syncKey, storageKey = null, onZoom = null, onReset = null, onPick = null }) {
    this.storageKey = storageKey;
    this.onZoom = onZoom;
    this.onReset = onReset;
    this.columns = null;
    this.anomalies = [];
    this.range = null;
    this.weight = Number(localStorage.getItem("training_platform.smoothing") || 0);
    this.xAxis = savedXAxis();
    this.charts = new Map();
    const ctx = {
      syncKey,
      smoothing: () => this.weight,
      xAxis: () => this.xAxis,
      onZoom: (lo, hi) => this.zoom([lo, hi]),
      onReset: () => this.zoom(null),
      onRemove: (spec) => this.removeCustom(spec.id),
      onPick: onPick || undefined,
    };
    this.ctx = ctx;
    this.sections = new Map(SECTIONS.map((s) => [s.id,
      h("div", { class: "chart-grid", "data-section": s.id })]));
    this.claimed = new Set(CHARTS.flatMap(claimedKeys));
    for (const spec of CHARTS) this.addChart(spec);
    for (const key of this.savedCustom()) this.addChart(customSpec(key));
    this.redraw = frameThrottle(() => this.draw());

    this.slider = h("input", {
      type: "range", min: "0", max: "0.99", step: "0.01", value: String(this.weight),
      "aria-label": "Smoothing", oninput: () => this.setSmoothing(Number(this.slider.value)),
    });
    this.sliderValue = h("output", {}, this.weight.toFixed(2));
    this.picker = new MetricPicker({ onPick: (key) => this.addPicked(key) });
    this.controls = h("div", { class: "board-controls" },
      h("label", { class: "control", title: "Exponential moving average of the mean line, as TensorBoard draws it; the band keeps the raw min/max" },
        "Smoothing ", this.slider, this.sliderValue),
      this.picker.root,
      h("label", { class: "control", title: "What the charts' x axis measures (remembered in this browser)" },
        "x axis ", h("select", {
          class: "x-axis-picker", "aria-label": "x axis",
          onchange: (event) => this.setXAxis(event.target.value),
        }, X_AXES.map((axis) => h("option", { value: axis.id, selected: axis.id === this.xAxis }, axis.label)))));
    // Charts with no data in this run fold away; this line says which.
    this.foldedNote = h("p", { class: "folded-note muted", hidden: true });
    this.root = h("div", { class: "board" },
      SECTIONS.map((s) => h("section", { class: "board-section", "data-section": s.id },
        h("h2", {}, s.title), this.sections.get(s.id))), this.foldedNote);
  }

  destroy() {
    for (const chart of this.charts.values()) chart.destroy();
    this.charts.clear();
  }

  addChart(spec) {
    if (this.charts.has(spec.id)) return;
    const chart = new MetricChart(spec, this.ctx);
    this.charts.set(spec.id, chart);
    this.sections.get(spec.section).append(chart.root);
    chart.setAnomalies(this.anomalies);
    if (this.range) chart.setRange(this.range);
    if (this.columns) chart.update(this.columns);
  }

  setColumns(columns) {
    this.columns = columns;
    this.redraw();
  }

  setAnomalies(anomalies) {
    this.anomalies = anomalies;
    for (const chart of this.charts.values()) chart.setAnomalies(anomalies);
  }

  /** Zoom every chart to [lo, hi] (null: the whole run) and tell the owner. */
  zoom(range) {
    this.range = range;
    for (const chart of this.charts.values()) chart.setRange(range);
    if (range && this.onZoom) this.onZoom(range[0], range[1]);
    if (!range && this.onReset) this.onReset();
  }

  setSmoothing(weight) {
    this.weight = weight;
    this.sliderValue.textContent = weight.toFixed(2);
    localStorage.setItem("training_platform.smoothing", String(weight));
    this.redraw();
  }

  draw() {
    if (!this.columns) return;
    for (const chart of this.charts.values()) chart.update(this.columns);
    this.refreshPicker();
    const folded = [...this.charts.values()].filter((chart) => chart.root.hidden).map((chart) => chart.spec.title);
    this.foldedNote.textContent = folded.length ? `Folded away, no data here: ${folded.join(", ")}.` : "";
    this.foldedNote.hidden = !folded.length;
  }

  setXAxis(axis) {
    this.xAxis = axis;
    saveXAxis(axis);
    this.redraw();
  }

  /** Offer every series no chart shows yet (extras, unknown groups), by group. */
  refreshPicker() {
    const shown = new Set(this.claimed);
    for (const id of this.charts.keys()) if (id.startsWith("custom:")) shown.add(id.slice(7));
    const options = this.columns.keys()
      .filter((key) => !shown.has(key))
      .sort();
    this.picker.setKeys(options);
  }

  addPicked(key) {
    const spec = customSpec(key);
    this.addChart(spec);
    this.saveCustom();
    this.refreshPicker();
    // It lands in "More metrics", below the fold: bring it into view.
    this.charts.get(spec.id).root.scrollIntoView({ block: "nearest" });
  }

  removeCustom(id) {
    const chart = this.charts.get(id);
    if (!chart) return;
    chart.destroy();
    chart.root.remove();
    this.charts.delete(id);
    this.saveCustom();
    if (this.columns) this.refreshPicker();
  }

  savedCustom() {
    if (!this.storageKey) return [];
    try {
      const keys = JSON.parse(localStorage.getItem(this.storageKey) || "[]");
      return Array.isArray(keys) ? keys.filter((k) => typeof k === "string") : [];
    } catch {
      return [];
    }
  }

  saveCustom() {
    if (!this.storageKey) return;
    const keys = [...this.charts.keys()].filter((id) => id.startsWith("custom:")).map((id) => id.slice(7));
    localStorage.setItem(this.storageKey, JSON.stringify(keys));
  }
}
