// The run page's "Config" section: the run file's config flattened to dotted keys,
// searchable, and the run's command, git state, host and framework below it.
//
// Everything shown is what `GET /api/jobs/{job_id}` gives: the server masks secrets
// in the config and the command (callbacks/wire/secrets.py) and the page never
// unmasks anything. Values go in as text nodes (format.js's h()), never as HTML.

import { configCell } from "./compare_logic.js";
import { counted, fmtTime, h } from "./format.js";

/** More keys than this and the section starts closed (so does one with none). */
export const OPEN_MAX_KEYS = 20;

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/**
 * Nested objects as dotted keys; a list, a scalar or an empty object is one value.
 * The same rule as the Compare view's config diff (history/compare.py's
 * flatten_config, which flattens on the server), so a key reads the same on both pages.
 */
export function flattenConfig(config, prefix = "") {
  if (!isObject(config) || (prefix && !Object.keys(config).length)) {
    return prefix ? { [prefix]: config } : {};
  }
  const flat = {};
  for (const [key, value] of Object.entries(config)) {
    Object.assign(flat, flattenConfig(value, prefix ? `${prefix}.${key}` : String(key)));
  }
  return flat;
}

/** A value as the text of its cell: JSON for lists and objects, "null" for null. */
export function valueText(value) {
  return value === null || value === undefined ? "null" : configCell(value).text;
}

/** `[{key, text}]`, sorted by key, of a config (any JSON; null: none). */
export function configRows(config) {
  return Object.entries(flattenConfig(config ?? {}))
    .map(([key, value]) => ({ key, text: valueText(value) }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/** The rows whose key or value holds `query` (case-insensitive; blank: all of them). */
export function filterConfigRows(rows, query) {
  const needle = String(query ?? "").trim().toLowerCase();
  if (!needle) return rows;
  return rows.filter((row) => row.key.toLowerCase().includes(needle)
    || row.text.toLowerCase().includes(needle));
}

/** The run's command line: an argv list joined by spaces, a string as it is. */
export function commandText(command) {
  if (command === null || command === undefined) return null;
  if (Array.isArray(command)) return command.map((arg) => String(arg)).join(" ");
  return valueText(command);
}

/** `[[label, text]]` of what the run file says besides the config (absent: left out). */
export function runFacts(run) {
  if (!run) return [];
  const facts = [];
  const command = commandText(run.command);
  if (command) facts.push(["Command", command]);
  const git = run.git;
  if (isObject(git) && git.commit) {
    facts.push(["Git commit", `${git.commit}${git.dirty ? " (dirty: uncommitted changes)" : ""}`]);
  } else if (git !== null && git !== undefined) {
    facts.push(["Git", valueText(git)]);
  }
  if (run.host !== null && run.host !== undefined) facts.push(["Host", valueText(run.host)]);
  const framework = run.framework;
  if (isObject(framework) && framework.name) {
    facts.push(["Framework", framework.version ? `${framework.name} ${framework.version}` : String(framework.name)]);
  } else if (framework !== null && framework !== undefined) {
    facts.push(["Framework", valueText(framework)]);
  }
  if (run.started_at) facts.push(["Started", fmtTime(run.started_at)]);
  if (run.config_dropped !== null && run.config_dropped !== undefined) {
    facts.push(["Config left out", valueText(run.config_dropped)]);
  }
  if (run.file_error) facts.push(["Run file", `newest version refused: ${run.file_error}`]);
  return facts;
}

/**
 * The section as a <details>, rebuilt only when the job's config or run file changes
 * (the run page refreshes the job every few seconds: the open state and the search
 * stay as the user left them).
 */
export class RunConfigSection {
  constructor() {
    this.rows = [];
    this.shownKey = null;
    this.search = h("input", {
      type: "search", class: "run-config-search", id: "run-config-search",
      placeholder: "Search keys and values", "aria-label": "Search the config",
      oninput: () => this.filter(),
    });
    this.countLabel = h("span", { class: "muted run-config-count", id: "run-config-count" });
    this.tbody = h("tbody");
    this.table = h("table", { class: "run-config-table", id: "run-config-table" }, this.tbody);
    this.empty = h("p", { class: "muted", id: "run-config-empty", hidden: true });
    this.facts = h("dl", { class: "run-facts", id: "run-facts" });
    this.summary = h("summary", {}, "Config");
    this.root = h("details", { class: "panel run-config", id: "run-config", hidden: true },
      this.summary,
      h("div", { class: "run-config-body" },
        h("div", { class: "run-config-tools" }, this.search, this.countLabel),
        h("div", { class: "run-config-wrap" }, this.table),
        this.empty,
        this.facts));
  }

  show(job) {
    const key = JSON.stringify([job.config ?? null, job.run ?? null]);
    if (key === this.shownKey) return;
    const first = this.shownKey === null;
    this.shownKey = key;
    this.rows = configRows(job.config);
    const facts = runFacts(job.run);
    this.root.hidden = false;
    // Open when there is a short config to read; closed when it is long, or empty.
    if (first) this.root.open = this.rows.length > 0 && this.rows.length <= OPEN_MAX_KEYS;
    this.summary.replaceChildren("Config ",
      h("span", { class: "muted" }, this.rows.length ? `(${counted(this.rows.length, "key")})` : "(none)"));
    this.facts.replaceChildren(...facts.flatMap(([label, text]) => [
      h("dt", {}, label), h("dd", { "data-fact": label }, text)]));
    this.filter();
  }

  filter() {
    const shown = filterConfigRows(this.rows, this.search.value);
    this.tbody.replaceChildren(...shown.map((row) => h("tr", { "data-key": row.key },
      h("td", { class: "config-key" }, row.key),
      h("td", { class: "config-value" }, row.text))));
    this.table.hidden = !shown.length;
    this.search.hidden = !this.rows.length;
    this.countLabel.textContent = this.rows.length && shown.length !== this.rows.length
      ? `${shown.length} of ${counted(this.rows.length, "key")}` : "";
    this.empty.hidden = shown.length > 0;
    this.empty.textContent = this.rows.length ? "No key or value matches." : "This run has no config.";
  }
}
