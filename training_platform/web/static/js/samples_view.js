// The run view's Samples panel: what the policy wrote, step by step.
//
//   GET /api/monitoring/{job}/samples/steps  the steps that have samples, with stats
//   GET /api/monitoring/{job}/samples        one step's samples (or the run's), filtered
//   live {"type": "samples", "step", "count"} samples of a step landed
//
// A step slider runs over the steps that have samples; "follow live" moves it to
// each newest step as its samples land. The table shows one line per sample; a
// click on it opens the full prompt and completion. Every text from the run
// (prompts, completions, groups, extra) goes into the page as text nodes, never as
// HTML: a completion holding <script> is shown, not run. The pure parts (queries,
// cells, the nearest step) are samples_logic.js.

import { ApiError, api, enc } from "./api.js";
import { counted, debounce, fmtStep, fmtTime, h } from "./format.js";
import {
  PAGE_SIZE, SORTS, componentCells, defaultFilters, describeStep, filtersActive,
  finishReasonOptions, groupByStep, indexOfStep, lengthCell, mergeStepStats,
  nearestStep, previewLine, promptQuery, rewardCell, samplesQuery, stepsQuery,
} from "./samples_logic.js";

const MAX_STEP_PAGES = 100; // pages of /samples/steps read at start (the API pages by step)
const LIVE_COALESCE_MS = 150;

export class SamplesView {
  constructor(jobId) {
    this.jobId = jobId;
    this.base = `/monitoring/${enc(jobId)}/samples`;
    this.stats = []; // step stats, ascending by step
    this.steps = []; // their steps (for the slider and the nearest-step search)
    this.step = null; // the step shown
    this.filters = defaultFilters();
    this.follow = true;
    this.loaded = false;
    this.stopped = false;
    this.rowsToken = 0;
    this.cursor = null;
    this.rows = [];
    this.expanded = new Set();
    this.pendingSteps = new Set();
    this.pendingOpenEnd = false;
    this.liveTimer = null;
    this.liveBusy = false;
    this.layout();
  }

  // -- layout -------------------------------------------------------------------

  layout() {
    this.countLabel = h("span", { class: "count samples-count", hidden: true });
    this.body = h("div", { class: "samples-body" }, h("p", { class: "muted" }, "Loading samples…"));
    // Hidden until start(): a run page whose job never appears has no samples to wait for.
    this.root = h("section", { class: "panel samples-panel", id: "samples-panel", hidden: true },
      h("div", { class: "samples-head" }, h("h2", {}, "Samples ", this.countLabel),
        h("span", { class: "muted samples-tip" }, "Click a point on any chart to see its step here.")),
      this.body);
  }

  /** The panel's controls, built once the run turns out to have samples. */
  buildControls() {
    this.slider = h("input", {
      type: "range", class: "samples-slider", min: "0", max: "0", step: "1", value: "0",
      "aria-label": "Step with samples",
      oninput: () => this.previewSlider(),
      onchange: () => this.goToIndex(Number(this.slider.value), { manual: true }),
    });
    this.prevButton = h("button", { class: "samples-prev", title: "Previous step with samples", onclick: () => this.goToIndex(this.index() - 1, { manual: true }) }, "◀");
    this.nextButton = h("button", { class: "samples-next", title: "Next step with samples", onclick: () => this.goToIndex(this.index() + 1, { manual: true }) }, "▶");
    this.stepLabel = h("strong", { class: "samples-step" });
    this.stepStats = h("span", { class: "samples-step-stats muted" });
    this.followBox = h("input", {
      type: "checkbox", class: "samples-follow", checked: this.follow,
      onchange: () => this.setFollow(this.followBox.checked),
    });
    this.note = h("p", { class: "samples-note muted", hidden: true });

    const onText = debounce(() => this.readFilters(), 300);
    const input = (attrs) => h("input", { ...attrs, oninput: onText, onchange: () => this.readFilters() });
    this.scopeSelect = h("select", { class: "samples-scope", "aria-label": "Which steps", onchange: () => this.readFilters() },
      h("option", { value: "step" }, "this step"), h("option", { value: "run" }, "all steps"));
    this.groupInput = input({ type: "text", class: "samples-group", placeholder: "group", "aria-label": "Group", list: "samples-groups", size: "10", maxlength: "256" });
    this.groupList = h("datalist", { id: "samples-groups" });
    this.finishSelect = h("select", { class: "samples-finish", "aria-label": "Finish reason", onchange: () => this.readFilters() });
    this.minInput = input({ type: "number", class: "samples-min", placeholder: "min", "aria-label": "Minimum reward", step: "any" });
    this.maxInput = input({ type: "number", class: "samples-max", placeholder: "max", "aria-label": "Maximum reward", step: "any" });
    this.searchInput = input({ type: "search", class: "samples-search", placeholder: "search prompt and completion", "aria-label": "Search", maxlength: "200" });
    this.sortSelect = h("select", { class: "samples-sort", "aria-label": "Sort by", onchange: () => this.readFilters() },
      SORTS.map((sort) => h("option", { value: sort.id }, sort.label)));
    this.orderSelect = h("select", { class: "samples-order", "aria-label": "Order", onchange: () => this.readFilters() },
      h("option", { value: "asc" }, "ascending"), h("option", { value: "desc" }, "descending"));
    this.clearButton = h("button", { class: "samples-clear", onclick: () => this.clearFilters() }, "Clear");
    this.fillFinishOptions([]);

    this.table = h("table", { class: "samples" });
    this.tbody = h("tbody");
    this.moreButton = h("button", { class: "samples-more", hidden: true, onclick: () => this.loadRows({ more: true }) }, "Load more");
    this.rowsNote = h("p", { class: "samples-rows-note muted" });

    this.body.replaceChildren(
      h("div", { class: "samples-nav" },
        this.prevButton, this.slider, this.nextButton,
        h("span", { class: "samples-where" }, this.stepLabel, " ", this.stepStats),
        h("label", { class: "control samples-follow-label", title: "Jump to the newest step as its samples land" },
          this.followBox, "follow live")),
      this.note,
      h("div", { class: "samples-filters" },
        h("label", { class: "control" }, "show ", this.scopeSelect),
        h("label", { class: "control" }, "group ", this.groupInput, this.groupList),
        h("label", { class: "control" }, "finish ", this.finishSelect),
        h("label", { class: "control" }, "reward ", this.minInput, "…", this.maxInput),
        h("label", { class: "control samples-search-label" }, this.searchInput),
        h("label", { class: "control" }, "sort ", this.sortSelect, this.orderSelect),
        this.clearButton),
      h("div", { class: "samples-table-wrap" }, this.table),
      h("div", { class: "samples-foot" }, this.rowsNote, this.moreButton));
  }

  showEmpty() {
    this.countLabel.hidden = true;
    this.body.replaceChildren(
      h("p", { class: "samples-empty" }, "No samples logged for this run."),
      h("p", { class: "muted samples-hint" },
        "Log them from the trainer with the callback's log_samples(step, prompts, completions, rewards=...), "
        + "or point the job at verl's rollout dumps (trainer.rollout_data_dir: a {job_id}_rollouts/ "
        + "directory next to the metrics file, or \"rollout_dir\" when adding the job)."));
  }

  showError(error) {
    this.body.replaceChildren(h("p", { class: "muted samples-error" }, `Samples unavailable (${error.message}).`));
  }

  // -- lifecycle ------------------------------------------------------------------

  async start() {
    this.root.hidden = false;
    try {
      const stats = await this.fetchSteps(null, null);
      if (this.stopped) return;
      this.stats = mergeStepStats(this.stats, stats);
      this.loaded = true;
      this.afterStepsChanged();
    } catch (error) {
      if (this.stopped) return;
      if (error instanceof ApiError && error.status === 404) {
        this.loaded = true;
        this.showEmpty();
      } else {
        this.showError(error);
      }
    }
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.liveTimer);
  }

  /** Step stats from `startStep` to `endStep` (either open), following the API's pages. */
  async fetchSteps(startStep, endStep) {
    const stats = [];
    let start = startStep;
    for (let page = 0; page < MAX_STEP_PAGES; page += 1) {
      const query = stepsQuery({ startStep: start, endStep });
      const body = await api(`${this.base}/steps${query ? `?${query}` : ""}`);
      stats.push(...body.steps);
      if (body.next_start_step === null || body.next_start_step === undefined) break;
      start = body.next_start_step;
    }
    return stats;
  }

  /** The live stream (re)connected: samples may have landed while it was down. */
  refreshSteps() {
    if (!this.loaded || this.stopped) return;
    this.pendingSteps.add(this.steps.length ? this.steps[this.steps.length - 1] : 0);
    this.pendingOpenEnd = true;
    this.scheduleLive();
  }

  /** A live {"type": "samples", step, count}: batched, then the steps' stats fetched. */
  onLive(message) {
    if (typeof message.step !== "number") return;
    this.pendingSteps.add(message.step);
    this.scheduleLive();
  }

  scheduleLive() {
    if (this.liveTimer || this.liveBusy || this.stopped) return;
    this.liveTimer = setTimeout(() => this.applyLive(), LIVE_COALESCE_MS);
  }

  async applyLive() {
    this.liveTimer = null;
    if (!this.loaded || this.stopped || !this.pendingSteps.size) {
      if (!this.loaded && !this.stopped) this.scheduleLive(); // still starting: try again soon
      return;
    }
    this.liveBusy = true;
    const steps = [...this.pendingSteps].sort((a, b) => a - b);
    this.pendingSteps.clear();
    try {
      const openEnd = this.pendingOpenEnd;
      this.pendingOpenEnd = false;
      const fresh = await this.fetchSteps(steps[0], openEnd ? null : steps[steps.length - 1]);
      if (this.stopped) return;
      for (const stat of fresh) steps.push(stat.step);
      this.stats = mergeStepStats(this.stats, fresh);
      const touched = new Set(steps);
      const wasEmpty = this.step === null;
      this.afterStepsChanged({ live: true });
      // The step on show got more samples (not moved by "follow"): show them, unless
      // the reader has a sample open.
      if (!wasEmpty && this.step !== null && touched.has(this.step) && !this.movedByLive
        && this.filters.scope === "step" && !this.expanded.size) {
        this.loadRows();
      }
    } catch {
      // Transient: the next message or reconnect fetches again.
    } finally {
      this.liveBusy = false;
      if (this.pendingSteps.size) this.scheduleLive();
    }
  }

  /** The step list changed (first load or live): slider range, and where to stand. */
  afterStepsChanged({ live = false } = {}) {
    this.steps = this.stats.map((stat) => stat.step);
    this.movedByLive = false;
    if (!this.steps.length) {
      this.showEmpty();
      return;
    }
    if (!this.slider) this.buildControls();
    this.countLabel.hidden = false;
    this.countLabel.textContent = `${fmtStep(this.steps.length)} step${this.steps.length === 1 ? "" : "s"}`;
    this.slider.max = String(this.steps.length - 1);
    const newest = this.steps[this.steps.length - 1];
    if (this.step === null || (this.follow && live && this.step !== newest)) {
      this.movedByLive = this.step !== null;
      this.goToStep(newest);
    } else {
      this.showStepHeader();
    }
  }

  // -- the step ---------------------------------------------------------------------

  index() {
    return indexOfStep(this.steps, this.step);
  }

  setFollow(on) {
    this.follow = on;
    if (this.followBox) this.followBox.checked = on;
    if (on && this.steps.length) {
      const newest = this.steps[this.steps.length - 1];
      if (this.step !== newest) this.goToStep(newest);
    }
  }

  goToIndex(index, { manual = false } = {}) {
    if (!this.steps.length) return;
    const clamped = Math.max(0, Math.min(this.steps.length - 1, index));
    this.goToStep(this.steps[clamped], { manual });
  }

  /** Show `step` (a step with samples). A reader moving off the newest stops following. */
  goToStep(step, { manual = false, note = "" } = {}) {
    if (manual && this.follow && step !== this.steps[this.steps.length - 1]) this.setFollow(false);
    const changed = step !== this.step;
    this.step = step;
    this.note.textContent = note;
    this.note.hidden = !note;
    this.showStepHeader();
    if (changed || !this.rowsLoadedFor(step)) {
      this.expanded.clear();
      this.loadRows();
    }
  }

  rowsLoadedFor(step) {
    return this.loadedKey === this.rowsKey(step);
  }

  rowsKey(step) {
    return JSON.stringify([this.filters.scope === "run" ? null : step, this.filters]);
  }

  /**
   * A chart click or an anomaly: show `step`, or the nearest step with samples
   * (halfway between two, the earlier: samples_logic.nearestStep), and say so.
   */
  showStepNear(step, { scroll = false } = {}) {
    if (scroll) this.root.scrollIntoView({ block: "start", behavior: "smooth" });
    if (!this.steps.length) return;
    const target = nearestStep(this.steps, step);
    const note = target === step ? ""
      : `Step ${fmtStep(step)} has no samples: showing the nearest step with samples, ${fmtStep(target)}.`;
    if (this.filters.scope === "run") {
      this.filters.scope = "step";
      this.scopeSelect.value = "step";
    }
    this.goToStep(target, { manual: true, note });
  }

  /** While the slider is dragged: say which step it is on; load it on release. */
  previewSlider() {
    const step = this.steps[Number(this.slider.value)];
    this.stepLabel.textContent = `step ${fmtStep(step)}`;
    this.stepStats.textContent = describeStep(this.stats[Number(this.slider.value)]);
  }

  showStepHeader() {
    const index = this.index();
    this.slider.value = String(Math.max(0, index));
    this.slider.title = `${fmtStep(index + 1)} of ${counted(this.steps.length, "step")} with samples`;
    this.stepLabel.textContent = `step ${fmtStep(this.step)}`;
    this.stepStats.textContent = describeStep(this.stats[index]);
    this.prevButton.disabled = index <= 0;
    this.nextButton.disabled = index >= this.steps.length - 1;
    this.root.dataset.step = String(this.step);
  }

  // -- filters ------------------------------------------------------------------------

  readFilters() {
    const next = {
      scope: this.scopeSelect.value,
      group: this.groupInput.value,
      finishReason: this.finishSelect.value,
      minReward: this.minInput.value,
      maxReward: this.maxInput.value,
      q: this.searchInput.value,
      sort: this.sortSelect.value,
      order: this.orderSelect.value,
    };
    if (JSON.stringify(next) === JSON.stringify(this.filters)) return;
    this.filters = next;
    this.expanded.clear();
    this.loadRows();
  }

  clearFilters() {
    this.filters = { ...defaultFilters(), scope: this.filters.scope };
    this.groupInput.value = "";
    this.finishSelect.value = "";
    this.minInput.value = "";
    this.maxInput.value = "";
    this.searchInput.value = "";
    this.sortSelect.value = this.filters.sort;
    this.orderSelect.value = this.filters.order;
    this.expanded.clear();
    this.loadRows();
  }

  fillFinishOptions(seen) {
    const options = finishReasonOptions(seen);
    const current = this.finishSelect.value;
    const known = [...this.finishSelect.options].map((o) => o.value).join("\n");
    if (known === ["", ...options].join("\n")) return;
    this.finishSelect.replaceChildren(h("option", { value: "" }, "any"),
      ...options.map((reason) => h("option", { value: reason }, reason)));
    this.finishSelect.value = options.includes(current) ? current : "";
  }

  // -- rows --------------------------------------------------------------------------------

  /** Fetch the rows for the step and filters (or the next page of them: `more`). */
  async loadRows({ more = false } = {}) {
    if (this.step === null) return;
    const token = ++this.rowsToken;
    const key = this.rowsKey(this.step);
    const query = samplesQuery(this.filters, { step: this.step, cursor: more ? this.cursor : null, limit: PAGE_SIZE });
    this.moreButton.disabled = true;
    if (!more) this.rowsNote.textContent = "Loading…";
    let body;
    try {
      body = await api(`${this.base}?${query}`);
    } catch (error) {
      if (token !== this.rowsToken || this.stopped) return;
      this.rowsNote.textContent = `Could not load the samples (${error.message}).`;
      this.moreButton.disabled = false;
      return;
    }
    if (token !== this.rowsToken || this.stopped) return; // superseded
    this.loadedKey = key;
    this.cursor = body.next_cursor || null;
    if (!more) {
      this.rows = [];
      this.renderHead();
      this.tbody.replaceChildren();
    }
    this.rows.push(...body.samples);
    for (const sample of body.samples) this.tbody.append(...this.renderRow(sample));
    this.moreButton.hidden = !this.cursor;
    this.moreButton.disabled = false;
    this.fillFinishOptions(this.rows.map((s) => s.finish_reason));
    this.groupList.replaceChildren(...[...new Set(this.rows.map((s) => s.group).filter(Boolean))]
      .slice(0, 200).map((group) => h("option", { value: group })));
    this.describeRows();
  }

  describeRows() {
    const shown = this.rows.length;
    const where = this.filters.scope === "run" ? "in the run" : `at step ${fmtStep(this.step)}`;
    if (!shown) {
      this.rowsNote.textContent = filtersActive(this.filters)
        ? `No samples ${where} match these filters.` : `No samples ${where}.`;
      this.table.hidden = true;
      return;
    }
    this.table.hidden = false;
    const total = this.filters.scope === "step" && !filtersActive(this.filters)
      ? this.stats[this.index()]?.count : null;
    const of = total && total > shown ? ` of ${fmtStep(total)}` : "";
    this.rowsNote.textContent = `${fmtStep(shown)}${of} sample${shown === 1 ? "" : "s"} ${where}`
      + `${this.cursor ? ", more to load" : ""}. Click a row for the full texts.`;
  }

  columns() {
    const columns = [];
    if (this.filters.scope === "run") columns.push(["step", "step"]);
    columns.push(["index", "#"], ["group", "group"], ["reward", "reward"], ["components", "components"],
      ["length", "length"], ["finish", "finish"], ["preview", "completion"]);
    return columns;
  }

  renderHead() {
    const columns = this.columns();
    this.table.replaceChildren(
      h("colgroup", {}, columns.map(([id]) => h("col", { class: id }))),
      h("thead", {}, h("tr", {}, columns.map(([id, label]) => h("th", { class: id }, label)))),
      this.tbody);
  }

  /** A sample's row (and its detail row, when it is open). */
  renderRow(sample) {
    const key = `${sample.step}:${sample.index}`;
    const reward = rewardCell(sample.reward);
    const length = lengthCell(sample);
    const cells = [];
    if (this.filters.scope === "run") cells.push(h("td", { class: "step" }, fmtStep(sample.step)));
    cells.push(
      h("td", { class: "index" }, String(sample.index)),
      h("td", { class: "group" }, sample.group ?? "–"),
      h("td", { class: `reward${reward.nonfinite ? " nonfinite" : ""}${reward.missing ? " muted" : ""}` }, reward.text),
      h("td", { class: "components" }, this.renderComponents(sample.rewards)),
      h("td", { class: "length", title: length.unit || "" }, length.text),
      h("td", { class: "finish" }, sample.finish_reason
        ? h("span", {
          class: `finish-reason${sample.finish_reason === "length" ? " finish-length" : ""}`,
          title: sample.finish_reason === "length" ? "Cut at the length limit (truncated)" : "",
        }, sample.finish_reason)
        : "–"),
      h("td", { class: "preview" }, previewLine(sample.completion)));
    const row = h("tr", {
      class: "sample-row", tabindex: "0", "aria-expanded": "false",
      dataset: { step: sample.step, index: sample.index },
    }, cells);
    const toggle = () => this.toggleRow(row, sample);
    row.addEventListener("click", toggle);
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        toggle();
      }
    });
    if (!this.expanded.has(key)) return [row];
    row.setAttribute("aria-expanded", "true");
    row.classList.add("open");
    return [row, this.renderDetail(sample)];
  }

  renderComponents(rewards) {
    const cells = componentCells(rewards);
    if (!cells.length) return "–";
    return cells.map((cell) => h("span", { class: `component${cell.nonfinite ? " nonfinite" : ""}`, title: cell.name },
      h("span", { class: "component-name" }, cell.name), " ", cell.text));
  }

  toggleRow(row, sample) {
    const key = `${sample.step}:${sample.index}`;
    const open = row.classList.toggle("open");
    row.setAttribute("aria-expanded", String(open));
    if (open) {
      this.expanded.add(key);
      row.after(this.renderDetail(sample));
    } else {
      this.expanded.delete(key);
      const next = row.nextElementSibling;
      if (next && next.classList.contains("sample-detail")) next.remove();
    }
  }

  /** The full texts of a sample, as text (white-space kept), and what else it carries. */
  renderDetail(sample) {
    const history = h("div", { class: "prompt-history", hidden: true });
    const facts = [
      ["step", fmtStep(sample.step)], ["index", String(sample.index)],
      ["group", sample.group ?? "–"], ["reward", rewardCell(sample.reward).text],
      ["response length", sample.response_length === null || sample.response_length === undefined
        ? "–" : `${fmtStep(sample.response_length)} tokens`],
      ["completion", `${fmtStep([...(sample.completion ?? "")].length)} characters`],
      ["finish reason", sample.finish_reason ?? "–"],
      ["logged", sample.timestamp ? fmtTime(sample.timestamp) : "–"],
    ];
    for (const cell of componentCells(sample.rewards)) facts.push([`reward: ${cell.name}`, cell.text]);
    const sameButton = h("button", {
      class: "samples-same-prompt",
      title: "This prompt's samples in every step of the run, side by side",
      disabled: !sample.prompt_digest,
      onclick: (event) => {
        event.stopPropagation();
        this.showPromptHistory(sample, history, sameButton);
      },
    }, "Same prompt across steps");
    const body = h("div", { class: "sample-detail-body" },
      h("div", { class: "sample-texts" },
        h("div", { class: "sample-text-block" }, h("h4", {}, "Prompt"),
          h("div", { class: "sample-text sample-prompt" }, sample.prompt)),
        h("div", { class: "sample-text-block" }, h("h4", {}, "Completion"),
          h("div", { class: "sample-text sample-completion" }, sample.completion))),
      h("div", { class: "sample-meta" },
        h("dl", { class: "facts sample-facts" }, facts.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)])),
        sample.extra && Object.keys(sample.extra).length
          ? h("div", {}, h("h4", {}, "extra"), h("div", { class: "sample-text sample-extra" }, JSON.stringify(sample.extra, null, 2)))
          : "",
        sameButton),
      history);
    return h("tr", { class: "sample-detail", dataset: { step: sample.step, index: sample.index } },
      h("td", { colspan: String(this.columns().length) }, body));
  }

  /** The prompt's samples across the run (prompt=<digest>, by step), one column per step. */
  async showPromptHistory(sample, container, button, cursor = null, before = []) {
    button.disabled = true;
    container.hidden = false;
    if (!cursor) container.replaceChildren(h("p", { class: "muted" }, "Loading this prompt's samples…"));
    let body;
    try {
      body = await api(`${this.base}?${promptQuery(sample.prompt_digest, { cursor })}`);
    } catch (error) {
      container.replaceChildren(h("p", { class: "muted" }, `Could not load them (${error.message}).`));
      button.disabled = false;
      return;
    }
    if (this.stopped) return;
    const samples = [...before, ...body.samples];
    const columns = groupByStep(samples);
    const more = body.next_cursor
      ? h("button", {
        class: "prompt-history-more",
        onclick: () => this.showPromptHistory(sample, container, button, body.next_cursor, samples),
      }, "Load more steps")
      : "";
    container.replaceChildren(
      h("div", { class: "prompt-history-head" },
        h("strong", {}, `This prompt in ${fmtStep(columns.length)} step${columns.length === 1 ? "" : "s"}`),
        h("span", { class: "muted" }, ` · ${counted(samples.length, "sample")}${body.next_cursor ? " so far" : ""}`),
        h("button", { class: "prompt-history-close", onclick: () => {
          container.hidden = true;
          container.replaceChildren();
          button.disabled = false;
        } }, "Close")),
      h("div", { class: "prompt-strip" }, columns.map((column) => h("div", {
        class: `prompt-step${column.step === sample.step ? " current" : ""}`, dataset: { step: column.step },
      },
      h("div", { class: "prompt-step-head" },
        h("button", { class: "link", title: "Show this step in the table", onclick: () => this.showStepNear(column.step) },
          `step ${fmtStep(column.step)}`)),
      column.samples.map((item) => this.renderCard(item, sample))))),
      more);
    button.disabled = false;
  }

  renderCard(item, current) {
    const reward = rewardCell(item.reward);
    const here = item.step === current.step && item.index === current.index;
    return h("div", { class: `prompt-card${here ? " current" : ""}`, dataset: { index: item.index } },
      h("div", { class: "prompt-card-head" },
        h("span", { class: "muted" }, `#${item.index}`),
        h("span", { class: `reward${reward.nonfinite ? " nonfinite" : ""}` }, `reward ${reward.text}`),
        item.finish_reason
          ? h("span", { class: `finish-reason${item.finish_reason === "length" ? " finish-length" : ""}` }, item.finish_reason)
          : ""),
      h("div", { class: "sample-text prompt-card-text" }, item.completion));
  }
}
