// How a run is shown wherever runs are listed (jobs list, Compare view): its health
// badge, its tags, its colour swatch. Text goes in as text nodes (format.js's h()).

import { h } from "./format.js";

const HEALTH_TITLES = {
  ok: "no warning or critical anomaly, not stalled",
  warning: "a warning anomaly, a stalled run, or the trainer flagged an anomaly",
  critical: "a critical anomaly was found",
};

export function healthBadge(health) {
  return h("span", { class: `badge health-badge health-${health}`, "data-health": health,
    title: HEALTH_TITLES[health] || "" }, health ?? "–");
}

/**
 * A run's tags as chips; with `onPick`, each is a button (e.g. "filter by this tag").
 */
export function tagChips(tags, onPick = null) {
  const list = Array.isArray(tags) ? tags : [];
  return h("span", { class: "tag-list" }, list.map((tag) => (onPick
    ? h("button", { type: "button", class: "tag-chip", "data-tag": tag, title: `Only runs tagged ${tag}`,
      onclick: () => onPick(tag) }, tag)
    : h("span", { class: "tag-chip", "data-tag": tag }, tag))));
}

/** A small square of the run's colour (compare_logic.js's runColor). */
export function swatch(color) {
  return h("i", { class: "run-swatch", style: `background:${color}` });
}
