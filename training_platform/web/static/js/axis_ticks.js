// Tick labels, axis widths and grid filters for the charts' y axes: pure functions,
// unit-tested in tests/axis_ticks.test.js.
//
// Labels read like a plotting library's: a linear axis gives every tick the same
// number of decimals, enough to tell neighbours apart ("0.0", "0.5", "1.0"; tiny or
// huge values as "2.5e-4"); a log axis labels its decades ("1e-6", "1e-4", "0.01",
// "1", "100", "1e5") and leaves the ticks between them unlabelled once the axis
// spans more than a decade. uPlot's log splits hold every 1..9 multiple of every
// decade: a grid line at each of them draws grey bands, so the log grid keeps one
// line per decade where it spans several.

/** Whether `value` is a power of ten (1e-6, 0.01, 1, 100...). */
export function isDecade(value) {
  if (!(value > 0)) return false;
  const exponent = Math.round(Math.log10(value));
  return Math.abs(value / 10 ** exponent - 1) < 1e-9;
}

/** "2.5e-4": `digits` decimals at most, trailing zeros (and a bare point) dropped. */
function sci(value, digits) {
  const [mantissa, exponent] = value.toExponential(digits).split("e");
  const trimmed = mantissa.includes(".") ? mantissa.replace(/0+$/, "").replace(/\.$/, "") : mantissa;
  return `${trimmed}e${Number(exponent)}`;
}

/** A log axis's label: decades as "1e-6" or, from 0.001 to 10,000, plainly. */
export function logLabel(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return null;
  if (value <= 0) return String(value);
  const exponent = Math.floor(Math.log10(value) + 1e-9);
  if (exponent >= -3 && exponent <= 4) {
    // Plain: enough decimals for a value like 0.002 or 2.5, none for 300.
    return value.toLocaleString("en-US", { maximumSignificantDigits: 3, useGrouping: false });
  }
  return sci(value, 2);
}

/** The ticks' spacing (the smallest gap between neighbours), or 0. */
function spacing(ticks) {
  let step = Infinity;
  for (let i = 1; i < ticks.length; i += 1) {
    const gap = Math.abs(ticks[i] - ticks[i - 1]);
    if (gap > 0 && gap < step) step = gap;
  }
  return Number.isFinite(step) ? step : 0;
}

/** How many decimals the mantissa of `step` needs (2.5e-4 → 1, 2e-4 → 0). */
function mantissaDecimals(step) {
  const mantissa = step.toExponential(6).split("e")[0].replace(/0+$/, "").replace(/\.$/, "");
  const point = mantissa.indexOf(".");
  return point < 0 ? 0 : mantissa.length - point - 1;
}

/**
 * Labels of a linear axis's ticks: one shared format, precise enough for the spacing.
 * Values from 0.001 to under a million are plain (thousands grouped), others "2.5e-4".
 */
export function linearLabels(ticks) {
  const finite = ticks.filter((v) => v !== null && v !== undefined && Number.isFinite(v));
  if (!finite.length) return ticks.map(() => null);
  const step = spacing(finite);
  const maxAbs = Math.max(...finite.map(Math.abs));
  const stepExp = step > 0 ? Math.floor(Math.log10(step) + 1e-9) : 0;
  const extra = step > 0 ? mantissaDecimals(step) : 0;
  const scientific = maxAbs !== 0 && (maxAbs >= 1e6 || maxAbs < 1e-3);
  const decimals = Math.min(12, Math.max(0, extra - stepExp));
  return ticks.map((value) => {
    if (value === null || value === undefined) return null;
    if (!Number.isFinite(value)) return String(value);
    if (Math.abs(value) < step * 1e-6 || value === 0) return "0";
    if (scientific) {
      const exponent = Math.floor(Math.log10(Math.abs(value)) + 1e-9);
      return sci(value, Math.min(6, Math.max(0, exponent - stepExp + extra)));
    }
    return value.toLocaleString("en-US", { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
  });
}

/**
 * Labels of a y axis's ticks (`null`: a tick left unlabelled, kept so). On a log
 * axis spanning more than a decade only the decades are labelled.
 */
export function tickLabels(ticks, log = false) {
  if (!log) return linearLabels(ticks);
  const present = ticks.filter((v) => v !== null && v !== undefined);
  const decades = present.filter(isDecade).length;
  return ticks.map((value) => {
    if (value === null || value === undefined) return null;
    if (decades >= 2 && !isDecade(value)) return null;
    return logLabel(value);
  });
}

/**
 * The splits a log axis draws grid lines at: every decade, and the ticks between
 * them only while the axis spans less than three decades (else: `null`, no line).
 */
export function logGridSplits(splits) {
  const decades = splits.filter((v) => v !== null && isDecade(v)).length;
  if (decades < 3) return splits;
  return splits.map((v) => (v !== null && isDecade(v) ? v : null));
}

/** A rough width in px of a label in the axis font (12px): digits ~7px, "." and "-" less. */
export function estimateWidth(text) {
  let width = 0;
  for (const ch of text) width += ".,-".includes(ch) ? 4 : 7;
  return width;
}

/**
 * The width of a y axis (uPlot's `size`) that fits its widest label: the text,
 * plus the tick (10px), the gap (5px) and a margin. `measure` gives a label's px.
 */
export function axisSize(labels, measure = estimateWidth) {
  let widest = 0;
  for (const label of labels || []) {
    if (label === null || label === undefined || label === "") continue;
    widest = Math.max(widest, measure(String(label)));
  }
  return Math.max(40, Math.ceil(widest) + 10 + 5 + 8);
}

/**
 * What a log axis can draw of `groups` (each a list of value arrays aligned on x:
 * one thing drawn, e.g. a line with its min and max): values <= 0 become gaps.
 * `dropped` counts the points of each group that lost a value (a bucket whose
 * minimum is <= 0 loses the bottom of its band: one point).
 */
export function dropNonPositive(groups) {
  let dropped = 0;
  const kept = groups.map((group) => {
    const hit = new Set();
    const values = group.map((column) => column.map((value, i) => {
      if (value === null || value === undefined || value > 0) return value;
      hit.add(i);
      return null;
    }));
    dropped += hit.size;
    return values;
  });
  return { groups: kept, dropped };
}

/** The line under a log chart that left points out, or null when none was. */
export function logScaleNote(dropped) {
  return dropped ? `Log scale: values ≤ 0 at ${dropped.toLocaleString("en-US")} points are not drawn.` : null;
}
