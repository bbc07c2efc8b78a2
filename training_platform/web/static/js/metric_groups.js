// The metric picker's pure part: a run's series grouped by their group (the prefix
// before the first dot) and narrowed by what the reader types. No DOM here, so
// Node's test runner imports it as the browser does (tests/metric_groups.test.js).

import { GROUP_TITLES, groupOf, groupTitle, seriesTitle } from "./chart_specs.js";

const ORDER = Object.keys(GROUP_TITLES);

/**
 * Whether `key` matches `query`: every word of the query (case-insensitive) is in
 * the key or in its title, so "rew mean" finds `reward.mean` and "actor loss"
 * finds `loss.actor_loss`. An empty query matches everything.
 */
export function matchesQuery(key, query) {
  const words = String(query || "").toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) return true;
  const text = `${key} ${seriesTitle(key)}`.toLowerCase();
  return words.every((word) => text.includes(word));
}

/**
 * The keys matching `query`, grouped: `[{group, title, items: [{key, title}]}]`,
 * the record's own groups first in their usual order (loss, reward, kl, ...), any
 * other group after them by name; keys sorted within a group.
 */
export function groupMetrics(keys, query = "") {
  const groups = new Map();
  for (const key of [...new Set(keys)].sort()) {
    if (!matchesQuery(key, query)) continue;
    const group = groupOf(key);
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push({ key, title: seriesTitle(key) });
  }
  const rank = (group) => {
    const at = ORDER.indexOf(group);
    return at < 0 ? ORDER.length : at;
  };
  return [...groups.keys()]
    .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))
    .map((group) => ({ group, title: groupTitle(group), items: groups.get(group) }));
}

/** The keys of grouped metrics in the order they are listed (for the arrow keys). */
export function listedKeys(groups) {
  return groups.flatMap((group) => group.items.map((item) => item.key));
}

/**
 * The option an arrow key moves to from `active` (a key, or null: none yet) by
 * `delta` (+1 down, -1 up) in `keys`: down from none is the first, up from none
 * the last, and the ends wrap around. null when nothing is listed.
 */
export function moveActive(keys, active, delta) {
  if (!keys.length) return null;
  const at = keys.indexOf(active);
  if (at < 0) return delta > 0 ? keys[0] : keys[keys.length - 1];
  return keys[(at + delta + keys.length) % keys.length];
}
