// A dialog to set a run's name, tags and notes (`PATCH /api/jobs/{job_id}`). What is
// set here is the platform's: the run's own file is never edited, and emptying the
// name gives the run file's name back (docs/contract.md).
//
// The dialog lives outside any table that is rebuilt on refresh (the jobs list
// redraws every two seconds), so typing is never interrupted.

import { api, enc } from "./api.js";
import { h } from "./format.js";
import { metaPatch } from "./jobs_logic.js";

export class RunMetaEditor {
  /** @param onSaved(job) called with the job as the server answered it. */
  constructor(onSaved) {
    this.onSaved = onSaved;
    this.job = null;
    this.title = h("p", { class: "meta-title" });
    this.name = h("input", { type: "text", id: "meta-name", maxlength: "256", autocomplete: "off" });
    this.tags = h("input", { type: "text", id: "meta-tags", autocomplete: "off",
      placeholder: "grpo, baseline" });
    this.notes = h("textarea", { id: "meta-notes", rows: "5", maxlength: "65536" });
    this.error = h("p", { class: "error-text", id: "meta-error" });
    this.save = h("button", { type: "button", id: "meta-save", onclick: () => this.submit() }, "Save");
    this.root = h("dialog", { id: "meta-dialog", class: "confirm-dialog meta-dialog" },
      h("form", { method: "dialog" },
        this.title,
        h("label", { class: "meta-field" }, "Name", this.name,
          h("span", { class: "muted" }, "Empty: the name from the run's file (or its job id).")),
        h("label", { class: "meta-field" }, "Tags", this.tags,
          h("span", { class: "muted" }, "Comma-separated.")),
        h("label", { class: "meta-field" }, "Notes", this.notes),
        this.error,
        h("div", { class: "dialog-buttons" },
          h("button", { type: "submit", value: "cancel", id: "meta-cancel" }, "Cancel"),
          this.save)));
  }

  open(job) {
    this.job = job;
    this.title.textContent = `Run ${job.job_id}`;
    this.name.value = job.name ?? "";
    this.tags.value = (job.tags || []).join(", ");
    this.notes.value = job.notes ?? "";
    this.error.textContent = "";
    this.save.disabled = false;
    this.root.showModal();
    this.name.focus();
  }

  async submit() {
    const { job } = this;
    if (!job) return;
    const body = metaPatch(job, { name: this.name.value, tags: this.tags.value, notes: this.notes.value });
    if (!body) {
      this.root.close();
      return;
    }
    this.save.disabled = true;
    try {
      const saved = await api(`/jobs/${enc(job.job_id)}`, { method: "PATCH", body });
      this.root.close();
      this.job = null;
      this.onSaved(saved);
    } catch (error) {
      this.error.textContent = `Not saved: ${error.message}`;
    } finally {
      this.save.disabled = false;
    }
  }
}
