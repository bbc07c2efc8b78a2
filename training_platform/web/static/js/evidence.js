// A recommendation's evidence (a dict of numbers, nested dicts, lists) as readable
// rows rather than JSON: {"per_step": 12, "thresholds": {"per_step": 5, "time_share": 0.05}}
// becomes [["per step", "12"], ["thresholds", "per step 5, time share 0.05"]].
// Pure, unit-tested in tests/evidence.test.js; the Artifacts tab draws the rows as a table.

import { fmtNumber } from "./format.js";

const LIST_SHOWN = 4;

/** "sync_time_share" → "sync time share". */
export function evidenceKey(key) {
  return String(key).replace(/_/g, " ");
}

/** One value as text: numbers to four significant digits, dicts as "key value, ...", lists joined or counted. */
export function evidenceValue(value, depth = 0) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") return fmtNumber(value);
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "string") return value;
  if (Array.isArray(value)) {
    if (!value.length) return "none";
    if (depth >= 2) return `${value.length} item${value.length === 1 ? "" : "s"}`;
    const nested = value.some((item) => item !== null && typeof item === "object");
    const shown = value.slice(0, LIST_SHOWN).map((item) => evidenceValue(item, depth + 1));
    const more = value.length > LIST_SHOWN ? ` (+${value.length - LIST_SHOWN} more)` : "";
    return shown.join(nested ? " | " : ", ") + more;
  }
  if (typeof value === "object") {
    const entries = Object.entries(value);
    if (!entries.length) return "none";
    if (depth >= 2) return `${entries.length} value${entries.length === 1 ? "" : "s"}`;
    return entries.map(([key, item]) => `${evidenceKey(key)} ${evidenceValue(item, depth + 1)}`).join(", ");
  }
  return String(value);
}

/** The evidence's rows: [label, text] per key (a non-dict evidence: one row). */
export function evidenceRows(evidence) {
  if (evidence === null || evidence === undefined) return [];
  if (typeof evidence !== "object" || Array.isArray(evidence)) return [["evidence", evidenceValue(evidence)]];
  return Object.entries(evidence).map(([key, value]) => [evidenceKey(key), evidenceValue(value)]);
}
