// The controls and pieces every chart shares (the run page's charts.js, the
// Compare view's compare_chart.js, the System tab's system_chart.js): the log
// toggle, the CSV download, the y axis (labels from axis_ticks.js, as wide as its
// widest label), the anomaly marker, and drag-to-zoom.

import { axisSize, estimateWidth, logGridSplits, tickLabels } from "./axis_ticks.js";
import { h } from "./format.js";
import { spanText } from "./incidents.js";

/** The chart header's "log" button (aria-pressed tells whether it is on). */
export function logToggle(on, onToggle) {
  return h("button", {
    class: "chart-tool chart-log",
    title: "Logarithmic y axis (values ≤ 0 cannot be drawn on it and are left out)",
    "aria-pressed": String(on),
    onclick: onToggle,
  }, "log");
}

export function csvButton(onclick) {
  return h("button", {
    class: "chart-tool chart-csv", title: "Download the points of this chart as CSV", onclick,
  }, "CSV");
}

/** Save `text` as `{name}.csv` (the name made safe for a file system). */
export function downloadCsv(name, text) {
  const safe = name.replace(/[^A-Za-z0-9_.-]+/g, "_");
  const url = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
  const link = h("a", { href: url, download: `${safe}.csv`, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * uPlot's cursor for a chart of a view whose charts zoom together: cursors in
 * sync, a drag selects a range (the view zooms every chart itself, through
 * `onDragSelect`, so only a user's drag counts as a zoom, never uPlot's own scale
 * updates), a double-click shows it all (`ctx.onReset`). `extra` adds options.
 */
export function zoomCursor(ctx, extra = {}) {
  return {
    sync: { key: ctx.syncKey },
    drag: { x: true, y: false, setScale: false },
    bind: {
      dblclick: () => () => {
        ctx.onReset();
        return null;
      },
    },
    ...extra,
  };
}

/**
 * uPlot's setSelect hook for `zoomCursor`: a drag of two pixels or more is
 * `handle(u, left, width)` (the selection in pixels), and the selection is cleared.
 */
export function onDragSelect(handle) {
  return (u) => {
    const { left, width } = u.select;
    if (width < 2) return;
    u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    handle(u, left, width);
  };
}

/** `ctx.onZoom(lo, hi)` with the dragged range in x values (`onDragSelect`'s handler). */
export function zoomToSelection(ctx) {
  return onDragSelect((u, left, width) => {
    ctx.onZoom(u.posToVal(left, "x"), u.posToVal(left + width, "x"));
  });
}

/** uPlot's y scale: base-10 log, or linear. */
export function yScale(log) {
  return log ? { distr: 3, log: 10 } : {};
}

/**
 * uPlot's y axis: labels like a plotting library's (axis_ticks.js), the axis as
 * wide as its widest label; a log axis leaves some ticks unlabelled (null) and
 * draws one grid line per decade where it spans several.
 */
export function yAxis(log) {
  return {
    values: (u, ticks) => tickLabels(ticks, log),
    size: (u, values) => axisSize(values, measureLabel),
    ...(log ? {
      grid: { filter: (u, splits) => logGridSplits(splits) },
      ticks: { filter: (u, splits) => logGridSplits(splits) },
    } : {}),
  };
}

/**
 * An anomaly's vertical marker at `left` (px over the plot), coloured by its
 * severity; its flag carries `prefix`, the step, severity, type and message as a
 * tooltip. Extra fields of the anomaly (an `end_step`, ...) are not needed here.
 */
export function anomalyMarker(anomaly, left, { prefix = "", style = "", dataset = {} } = {}) {
  const severity = String(anomaly.severity ?? "warning").replace(/[^a-z]/g, "");
  return h("div", {
    class: `marker anomaly-marker severity-${severity}`,
    style: `left:${left.toFixed(1)}px;${style}`,
    title: `${prefix}${spanText(anomaly)} · ${anomaly.severity} · ${anomaly.type}: ${anomaly.message}`,
    dataset: { step: anomaly.step, type: anomaly.type, ...dataset },
  });
}

// The y axis's labels measured in uPlot's axis font (an estimate without a canvas).
const AXIS_FONT = '12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif';
let measureContext;
function measureLabel(text) {
  if (measureContext === undefined) {
    measureContext = document.createElement("canvas").getContext("2d") || null;
    if (measureContext) measureContext.font = AXIS_FONT;
  }
  return measureContext ? measureContext.measureText(text).width : estimateWidth(text);
}
