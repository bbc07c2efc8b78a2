// "Add chart": a search box over a run's series, listed by group (loss, reward, kl,
// ...) and narrowed as the reader types (metric_groups.js). Nothing is chosen until
// the reader picks: a click, or the arrow keys and Enter (Enter alone takes the only
// match, or the first). Escape closes the list.

import { groupMetrics, listedKeys, moveActive } from "./metric_groups.js";
import { h } from "./format.js";

let pickers = 0;

export class MetricPicker {
  /**
   * @param options {onPick(key), label?}  onPick: the series the reader chose.
   */
  constructor({ onPick, label = "Add chart" }) {
    this.onPick = onPick;
    this.keys = [];
    this.shown = [];
    this.active = null;
    pickers += 1;
    const listId = `metric-picker-list-${pickers}`;
    this.input = h("input", {
      type: "search", class: "series-picker metric-search", role: "combobox",
      placeholder: "search metrics…", autocomplete: "off", spellcheck: "false",
      "aria-label": "Search the metrics to add as a chart", "aria-expanded": "false",
      "aria-controls": listId, "aria-autocomplete": "list",
      oninput: () => this.open(),
      onfocus: () => this.open(),
      onclick: () => this.open(), // focused already (after a pick): a click opens it again
      onkeydown: (event) => this.onKey(event),
      onblur: () => this.close(),
    });
    this.list = h("ul", { class: "metric-list", id: listId, role: "listbox", hidden: true,
      // Keep the focus in the box while a click picks (a blur would close the list first).
      onmousedown: (event) => event.preventDefault() });
    this.button = h("button", { type: "button", class: "metric-add", onclick: () => this.input.focus() }, label);
    this.root = h("span", { class: "control metric-picker" }, this.button,
      h("span", { class: "metric-picker-box" }, this.input, this.list));
  }

  /** The series on offer (those without a chart yet). */
  setKeys(keys) {
    const next = [...keys];
    if (next.join("\n") === this.keys.join("\n")) return;
    this.keys = next;
    this.input.placeholder = next.length ? `search ${next.length} metrics…` : "every metric has a chart";
    if (!this.list.hidden) this.render();
  }

  open() {
    this.list.hidden = false;
    this.input.setAttribute("aria-expanded", "true");
    this.render();
  }

  close() {
    this.list.hidden = true;
    this.input.setAttribute("aria-expanded", "false");
    this.setActive(null);
  }

  render() {
    const groups = groupMetrics(this.keys, this.input.value);
    this.shown = listedKeys(groups);
    if (!this.shown.includes(this.active)) this.active = null;
    const query = this.input.value.trim();
    if (!groups.length) {
      const why = this.keys.length ? `No metric matches “${query}”.` : "Every metric already has a chart.";
      this.list.replaceChildren(h("li", { class: "metric-none muted", role: "presentation" }, why));
      return;
    }
    this.list.replaceChildren(...groups.map((group) => h("li", { role: "presentation", class: "metric-group" },
      h("div", { class: "metric-group-title", role: "presentation" }, group.title),
      h("ul", { role: "group", "aria-label": group.title }, group.items.map((item) => h("li", {
        role: "option", class: "metric-option", id: `${this.list.id}-${this.shown.indexOf(item.key)}`,
        "data-key": item.key, "aria-selected": String(item.key === this.active), title: item.key,
        onclick: () => this.pick(item.key),
      }, h("span", { class: "metric-title" }, item.title),
      item.title !== item.key ? h("span", { class: "metric-key muted" }, item.key) : ""))))));
    this.setActive(this.active);
  }

  setActive(key) {
    this.active = key;
    for (const option of this.list.querySelectorAll(".metric-option")) {
      const on = option.dataset.key === key;
      option.setAttribute("aria-selected", String(on));
      if (on) option.scrollIntoView({ block: "nearest" });
    }
    if (key) this.input.setAttribute("aria-activedescendant", `${this.list.id}-${this.shown.indexOf(key)}`);
    else this.input.removeAttribute("aria-activedescendant");
  }

  onKey(event) {
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      if (this.list.hidden) this.open();
      this.setActive(moveActive(this.shown, this.active, event.key === "ArrowDown" ? 1 : -1));
    } else if (event.key === "Enter") {
      event.preventDefault();
      const key = this.active ?? (this.input.value.trim() ? this.shown[0] : null);
      if (key) this.pick(key);
    } else if (event.key === "Escape") {
      event.preventDefault(); // a search box would clear itself, and its input event reopen the list
      this.close();
    }
  }

  pick(key) {
    this.input.value = "";
    this.close();
    this.onPick(key);
  }
}
