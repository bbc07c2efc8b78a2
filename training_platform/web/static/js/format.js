// Small pure helpers: numbers, times, DOM building.

/** The API writes non-finite numbers as strings (docs/contract.md); these are they. */
export const NONFINITE = new Set(["NaN", "Infinity", "-Infinity"]);

export function fmtNumber(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "string") return value; // "NaN", "Infinity", ...
  if (!Number.isFinite(value)) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs >= 1e6 || abs < 1e-3)) return value.toExponential(3);
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  // Four significant digits, no trailing zeros (a regex trimming toPrecision's
  // output also ate an integer part's zeros: 1200.3 came out as "12").
  return value.toLocaleString("en-US", { maximumSignificantDigits: 4 });
}

export function fmtStep(step) {
  return step === null || step === undefined ? "–" : Number(step).toLocaleString("en-US");
}

/** "1 anomaly", "3 anomalies": a count with its noun in the right number. */
export function counted(count, singular, plural = `${singular}s`) {
  return `${fmtStep(count)} ${count === 1 ? singular : plural}`;
}

export function fmtAgo(seconds, now = Date.now() / 1000) {
  if (!seconds) return "never";
  const delta = Math.max(0, now - seconds);
  if (delta < 2) return "just now";
  if (delta < 90) return `${Math.round(delta)} s ago`;
  if (delta < 5400) return `${Math.round(delta / 60)} min ago`;
  if (delta < 129600) return `${Math.round(delta / 3600)} h ago`;
  return `${Math.round(delta / 86400)} d ago`;
}

export function fmtTime(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "–";
}

/** Local wall-clock time: seconds shown for spans under 10 min, the date past a day. */
export function fmtClock(seconds, span) {
  const date = new Date(seconds * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  const clock = `${pad(date.getHours())}:${pad(date.getMinutes())}`;
  const withSeconds = span < 600 ? `${clock}:${pad(date.getSeconds())}` : clock;
  if (span < 86_400) return withSeconds;
  return `${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${clock}`;
}

export function fmtBytes(size) {
  if (size < 1024) return `${size} B`;
  if (size < 1024 ** 2) return `${(size / 1024).toFixed(1)} KiB`;
  return `${(size / 1024 ** 2).toFixed(1)} MiB`;
}

/**
 * Build an element: h("a", {href: "#/", class: "x"}, "text", child, ...).
 * Text goes in as text nodes, never as HTML, so job ids and messages are safe.
 */
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      element.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      Object.assign(element.dataset, value);
    } else if (key === "style") {
      // Through the CSSOM: the page's CSP (no 'unsafe-inline') refuses style attributes.
      element.style.cssText = String(value);
    } else {
      element.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function statusBadge(status) {
  return h("span", { class: `badge status-${status}`, "data-status": status }, status);
}

/**
 * Progress as "current / total" and a bar. A completed run shows its full progress
 * whatever its last step says: step loops count from 0, so the last step of a
 * 700-step run is 699, which is 700 steps done, not 699.
 */
export function progressBar(current, total, status = null) {
  if (current !== null && current !== undefined && current < 0) current = null;
  if (status === "completed" && total) current = Math.max(current ?? 0, total);
  const fraction = total ? Math.min(1, Math.max(0, (current ?? 0) / total)) : 0;
  const label = total ? `${fmtStep(current)} / ${fmtStep(total)}` : fmtStep(current);
  const percent = total ? ` (${Math.floor(fraction * 100)} %)` : "";
  const bar = h("div", { class: "progress", title: `${label}${percent}`, "data-fraction": fraction.toFixed(4) });
  bar.append(h("div", { class: "progress-fill", style: `width:${(fraction * 100).toFixed(1)}%` }));
  return h("div", { class: "progress-cell" }, bar, h("span", { class: "progress-label" }, label));
}

/** Run `fn` at most once per animation frame, however often it is asked for. */
export function frameThrottle(fn) {
  let pending = false;
  return () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      fn();
    });
  };
}

export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/** A snake_case name a narrow cell may wrap after an underscore, never mid-word
 * ("gradient_explo sion" was drawn): the parts with a <wbr> after each "_". */
export function breakable(name) {
  const parts = String(name).split("_");
  return parts.flatMap((part, i) => (i < parts.length - 1 ? [`${part}_`, h("wbr")] : [part]));
}
