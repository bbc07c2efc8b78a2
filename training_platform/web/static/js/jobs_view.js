// The jobs view: every job with status, health, progress, last update and anomalies,
// grouped by project, filtered, and picked for a comparison.
//
// Kept current by polling GET /api/jobs every two seconds: one cheap query per page,
// where a WebSocket per job would not scale to a page listing hundreds. So a job's
// health badge turns to warning or critical within two seconds, no reload. It shows
// the most recently updated runs first, a page at a time ("more" adds a page): a
// thousand finished runs do not slow the list down.
//
// The filters (text, status, health, tags, project) are the API's own, so a page is
// a page of matching runs; they and the runs picked for a comparison live in the
// URL (`#/?status=running&tag=grpo&sel=a,b`, jobs_logic.js), so a filtered list or a
// half-made comparison is a link to share, and Back from a comparison keeps it.
// Deleting a run and editing its name, tags and notes happen in dialogs that live
// outside the table (the table is rebuilt on every refresh).

import { ApiError, api, enc } from "./api.js";
import { MAX_RUNS, compareHash } from "./compare_logic.js";
import { debounce, fmtAgo, fmtTime, h, statusBadge } from "./format.js";
import {
  HEALTHS, STATUSES, filtersActive, groupByProject, ingesterLabel, jobsApiFilters, jobsHash, parseJobsState,
  parseTags, progressFigures, sourceLabel, storedText, storedTitle, toggleSelection,
} from "./jobs_logic.js";
import { progressCell } from "./panels.js";
import { RegisterForm } from "./register_form.js";
import { RunMetaEditor } from "./run_meta_editor.js";
import { healthBadge, tagChips } from "./run_labels.js";

const REFRESH_MS = 2000;
const PAGE = 100; // jobs per "more"
const MAX_PAGE = 500; // the most one GET /api/jobs answers
const COLUMNS = 11;
const HEADER_TITLES = {
  progress: "The furthest step known (the trainer's status file or the latest stored record) of the total",
  "stored metrics": "Metric records stored and the step of the latest: fewer records than steps is normal when the trainer logs every few steps",
};

export class JobsView {
  constructor(root, setConnection, query = "") {
    this.root = root;
    this.setConnection = setConnection;
    this.state = parseJobsState(query);
    this.timer = null;
    this.jobs = [];
    this.refreshing = 0;
    this.table = h("tbody", { id: "jobs-body" });
    this.note = h("p", { class: "muted", id: "jobs-note" });
    this.wanted = PAGE;
    this.more = h("button", { type: "button", class: "link", id: "jobs-more", hidden: true,
      onclick: () => this.showMore() }, `show ${PAGE} more`);
    this.selectNote = "";
    this.hasMore = false;
    this.pendingDelete = null;
    this.confirmText = h("p", {});
    this.confirmError = h("p", { class: "error-text" });
    this.dialog = h("dialog", { id: "delete-dialog", class: "confirm-dialog" },
      h("form", { method: "dialog" },
        this.confirmText,
        h("p", { class: "muted" }, "Its stored metrics, anomalies and sync state are removed; "
          + "its files are not touched. It will not be discovered again unless registered."),
        this.confirmError,
        h("div", { class: "dialog-buttons" },
          h("button", { type: "submit", value: "cancel", id: "delete-cancel" }, "Cancel"),
          h("button", { type: "button", class: "danger", id: "delete-confirm",
            onclick: () => this.confirmDelete() }, "Delete"))));
    this.editor = new RunMetaEditor(() => this.refresh());
    this.register = new RegisterForm(() => this.refresh());
    this.filters = this.buildFilters();
    this.selectionBar = h("div", { class: "selection-bar", id: "jobs-selection" });
  }

  async start() {
    this.root.replaceChildren(
      h("div", { class: "page-head" }, h("h1", {}, "Training runs"), this.note),
      this.filters,
      this.selectionBar,
      h("table", { class: "jobs" },
        h("thead", {}, h("tr", {}, ["", "job", "status", "health", "progress", "stored metrics", "last update", "anomalies", "source", "", ""]
          .map((title) => h("th", { title: HEADER_TITLES[title] ?? null }, title)))),
        this.table),
      h("p", {}, this.more),
      this.dialog,
      this.editor.root,
      this.register.root);
    this.showSelection();
    await this.refresh();
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  stop() {
    clearInterval(this.timer);
  }

  // --- filters and selection ----------------------------------------------------------

  buildFilters() {
    this.search = h("input", { type: "search", id: "jobs-q", placeholder: "job id or name",
      "aria-label": "Search job id or name", value: this.state.q, maxlength: "256",
      oninput: debounce(() => this.setState({ q: this.search.value.trim() }), 300) });
    this.statusBoxes = STATUSES.map((status) => h("input", { type: "checkbox", value: status,
      checked: this.state.status.includes(status),
      onchange: () => this.setState({ status: this.statusBoxes.filter((box) => box.checked).map((box) => box.value) }) }));
    this.health = h("select", { id: "jobs-health", "aria-label": "Health",
      onchange: () => this.setState({ health: this.health.value }) },
      h("option", { value: "" }, "any health"),
      HEALTHS.map((health) => h("option", { value: health, selected: this.state.health === health }, health)));
    this.tags = h("input", { type: "text", id: "jobs-tags", placeholder: "tags, comma-separated",
      "aria-label": "Tags (a run must have every one)", value: this.state.tags.join(", "),
      onchange: () => this.setState({ tags: parseTags(this.tags.value) }) });
    this.projectChip = h("span", { class: "project-filter", id: "jobs-project" });
    this.clear = h("button", { type: "button", id: "jobs-clear",
      onclick: () => this.setState({ q: "", status: [], health: "", tags: [], project: "" }) }, "Clear filters");
    this.syncFilterControls();
    return h("div", { class: "jobs-filters", id: "jobs-filters" },
      this.search,
      h("span", { class: "status-filters", title: "Runs with any of the ticked statuses" },
        this.statusBoxes.map((box) => h("label", { class: "status-filter" }, box, box.value))),
      this.health, this.tags, this.projectChip, this.clear,
      h("button", { type: "button", id: "jobs-register", title: "A run whose files are elsewhere, "
        + "or logged by verl's file logger", onclick: () => this.register.open() }, "Register a run"));
  }

  /** The controls as the state says (a tag clicked in a row, "only this project", Clear). */
  syncFilterControls() {
    if (this.search.value.trim() !== this.state.q) this.search.value = this.state.q;
    for (const box of this.statusBoxes) box.checked = this.state.status.includes(box.value);
    this.health.value = this.state.health;
    if (parseTags(this.tags.value).join("\n") !== this.state.tags.join("\n")) this.tags.value = this.state.tags.join(", ");
    this.projectChip.replaceChildren(...(this.state.project ? [
      "project: ", h("strong", {}, this.state.project), " ",
      h("button", { type: "button", class: "link", title: "Every project",
        onclick: () => this.setState({ project: "" }) }, "×")] : []));
    this.clear.disabled = !filtersActive(this.state);
  }

  /** Change the filters or selection: kept in the URL (no navigation), then refetched. */
  setState(patch, { refetch = true } = {}) {
    this.state = { ...this.state, ...patch };
    window.history.replaceState(null, "", jobsHash(this.state));
    this.syncFilterControls();
    this.showSelection();
    if (refetch) {
      this.wanted = PAGE;
      this.refresh();
    } else {
      this.render();
    }
  }

  addTagFilter(tag) {
    if (!this.state.tags.includes(tag)) this.setState({ tags: [...this.state.tags, tag] });
  }

  toggle(jobId) {
    const { selected, refused } = toggleSelection(this.state.selected, jobId);
    this.selectNote = refused
      ? `At most ${MAX_RUNS} runs can be compared at once (the API's limit): unselect one first.` : "";
    this.setState({ selected }, { refetch: false });
  }

  showSelection() {
    const { selected } = this.state;
    const listed = new Set(this.jobs.map((job) => job.job_id));
    const hidden = selected.filter((id) => !listed.has(id)).length;
    const compare = selected.length
      ? h("a", { class: "button compare-button", id: "jobs-compare",
        href: compareHash({ jobs: selected, x: "step", smoothing: 0, window: null, fields: null }) },
      `Compare ${selected.length} run${selected.length === 1 ? "" : "s"}`)
      : h("span", { class: "muted" }, `Tick runs to compare them (up to ${MAX_RUNS}).`);
    this.selectionBar.replaceChildren(
      compare,
      selected.length ? h("span", { class: "muted", id: "jobs-selected-count" },
        `${selected.length} / ${MAX_RUNS} selected${hidden && this.jobs.length ? ` (${hidden} not in this list)` : ""}`) : "",
      selected.length ? h("button", { type: "button", class: "link", id: "jobs-unselect",
        onclick: () => this.setState({ selected: [] }, { refetch: false }) }, "clear selection") : "",
      this.selectNote ? h("span", { class: "error-text", id: "jobs-select-note" }, this.selectNote) : "");
  }

  // --- the list -----------------------------------------------------------------------

  async refresh() {
    const mine = ++this.refreshing;
    let jobs, more;
    try {
      ({ jobs, more } = await this.fetchJobs());
      this.setConnection("polling");
    } catch (error) {
      if (mine !== this.refreshing) return;
      if (error instanceof ApiError && error.status === 422) {
        this.note.textContent = `These filters were refused: ${error.message}`;
        this.jobs = [];
        this.table.replaceChildren();
        return;
      }
      this.setConnection("reconnecting", error.message);
      return;
    }
    if (mine !== this.refreshing) return; // filters changed meanwhile: a newer answer comes
    this.jobs = jobs;
    this.hasMore = more;
    this.render();
  }

  render() {
    const { jobs } = this;
    const count = `${jobs.length}${this.hasMore ? "+" : ""} job${jobs.length === 1 ? "" : "s"}`;
    const filtered = filtersActive(this.state);
    if (jobs.length) {
      this.note.textContent = `${count}${filtered ? " matching the filters" : ""} · most recently updated first · updated every ${REFRESH_MS / 1000} s`;
    } else {
      this.note.textContent = filtered
        ? "No job matches these filters."
        : "No jobs yet: start a training run with PlatformCallback writing to PLATFORM_METRICS_DIR, or register one (Register a run, or POST /api/jobs).";
    }
    this.more.hidden = !this.hasMore;
    const selected = new Set(this.state.selected);
    const full = selected.size >= MAX_RUNS;
    const rows = [];
    for (const group of groupByProject(jobs)) {
      rows.push(this.projectRow(group));
      for (const job of group.jobs) rows.push(this.row(job, selected.has(job.job_id), full));
    }
    this.table.replaceChildren(...rows);
    this.showSelection();
  }

  projectRow({ project, jobs }) {
    const only = project !== null && this.state.project !== project
      ? h("button", { type: "button", class: "link project-only", onclick: () => this.setState({ project }) },
        "only this project") : "";
    return h("tr", { class: "project-row", "data-project": project ?? "" },
      h("th", { colspan: String(COLUMNS) },
        h("span", { class: "project-name" }, project ?? "no project"),
        h("span", { class: "muted" }, ` · ${jobs.length} run${jobs.length === 1 ? "" : "s"} `), only));
  }

  row(job, isSelected, full) {
    const anomalies = job.anomaly_count
      ? h("span", { class: "badge anomaly-badge", title: job.anomaly_reason || "" }, `⚠ ${job.anomaly_count}`)
      : h("span", { class: "muted" }, "none");
    const source = sourceLabel(job);
    const ingester = ingesterLabel(job);
    const refuse = full && !isSelected;
    const box = h("input", { type: "checkbox", class: "select-job", checked: isSelected,
      "aria-label": `Compare ${job.job_id}`,
      title: refuse ? `At most ${MAX_RUNS} runs can be compared at once: unselect one first.` : "Pick for a comparison",
      onchange: () => this.toggle(job.job_id) });
    const name = typeof job.name === "string" && job.name ? job.name : null;
    return h("tr", { "data-job": job.job_id, class: isSelected ? "selected" : null },
      h("td", { class: "select-cell" }, box),
      h("td", { class: "job-cell" },
        h("a", { href: `#/run/${enc(job.job_id)}`, class: "job-link" }, name ?? job.job_id),
        name ? h("span", { class: "job-id muted" }, job.job_id) : "",
        tagChips(job.tags, (tag) => this.addTagFilter(tag)),
        job.notes ? h("span", { class: "job-notes muted", title: job.notes }, job.notes) : ""),
      h("td", {}, statusBadge(job.status)),
      h("td", {}, healthBadge(job.health)),
      h("td", { class: "progress-td" }, progressCell(job)),
      h("td", { class: "stored-cell", title: storedTitle(progressFigures(job)) }, storedText(progressFigures(job))),
      h("td", { title: fmtTime(job.updated_at) }, fmtAgo(job.updated_at ?? job.last_synced_at)),
      h("td", {}, anomalies),
      h("td", { class: "muted source-cell" }, source,
        ingester ? h("span", { class: "ingester", title: ingester.title }, ingester.text) : ""),
      h("td", {}, h("button", { class: "link edit-job", title: `Name, tags and notes of ${job.job_id}`,
        "aria-label": `Edit run ${job.job_id}`, onclick: () => this.editor.open(job) }, "edit")),
      h("td", {}, h("button", { class: "link delete-job", title: `Delete run ${job.job_id}`,
        "aria-label": `Delete run ${job.job_id}`, onclick: () => this.askDelete(job.job_id) }, "delete")));
  }

  // The first `wanted` matching jobs, most recently updated first, in pages the API
  // accepts. `more`: the last page was full, so there may be more (the server orders
  // them, so pages line up; the job id breaks ties).
  async fetchJobs() {
    const jobs = [];
    const filters = jobsApiFilters(this.state);
    while (jobs.length < this.wanted) {
      const size = Math.min(MAX_PAGE, this.wanted - jobs.length);
      const body = await api(`/jobs?order=updated&limit=${size}&offset=${jobs.length}${filters ? `&${filters}` : ""}`);
      jobs.push(...body.jobs);
      if (body.jobs.length < size) return { jobs, more: false };
    }
    return { jobs, more: true };
  }

  async showMore() {
    this.wanted += PAGE;
    await this.refresh();
  }

  askDelete(jobId) {
    this.pendingDelete = jobId;
    this.confirmText.textContent = `Delete run ${jobId}?`;
    this.confirmError.textContent = "";
    this.dialog.showModal();
  }

  async confirmDelete() {
    const jobId = this.pendingDelete;
    if (!jobId) return;
    try {
      await api(`/jobs/${enc(jobId)}`, { method: "DELETE" });
    } catch (error) {
      if (error.status !== 404) { // already gone is what was asked for
        this.confirmError.textContent = `Could not delete: ${error.message}`;
        return;
      }
    }
    this.pendingDelete = null;
    this.dialog.close();
    if (this.state.selected.includes(jobId)) {
      this.setState({ selected: this.state.selected.filter((id) => id !== jobId) }, { refetch: false });
    }
    await this.refresh();
  }
}
