// A dialog to register a run whose files the platform does not find by itself
// (`POST /api/jobs`): a directory on the server's machine and the format its run is
// logged in: this platform's callback files, verl's file logger (with its file's
// name when it is not the job id's), a TensorBoard run directory or a W&B offline run
// (docs/contract.md, "Runs logged by other tools"). SSH sources, Trackio (project and
// run) and MLflow (tracking URI and run id) stay with the API and `import` for now.
//
// Like the run editor, it lives outside the jobs table that is redrawn on refresh.

import { api } from "./api.js";
import { h } from "./format.js";

export const FORMATS = [
  ["platform", "this platform's callback ({job_id}_metrics.jsonl)"],
  ["verl_file", "verl's file logger ({job_id}.jsonl, or the file named)"],
  ["tensorboard", "TensorBoard (the directory's events.out.tfevents.* files)"],
  ["wandb", "W&B offline run (an offline-run-* directory)"],
];

/** The request body for the form's values; null with the reason when incomplete. */
export function registerBody({ jobId, directory, format, file = "" }) {
  const job_id = jobId.trim();
  const metrics_dir = directory.trim();
  const named = file.trim();
  if (!job_id) return { error: "A job id is needed: the file's name without its suffix." };
  if (!metrics_dir) return { error: "A directory on the server's machine is needed." };
  if (named && format !== "verl_file") return { error: "Only verl's file logger takes a file name." };
  return { body: named ? { job_id, metrics_dir, format, file: named } : { job_id, metrics_dir, format } };
}

export class RegisterForm {
  /** @param onRegistered(job) called with the job as the server answered it. */
  constructor(onRegistered) {
    this.onRegistered = onRegistered;
    this.jobId = h("input", { type: "text", id: "register-job-id", maxlength: "128", autocomplete: "off",
      placeholder: "grpo-qwen-7b" });
    this.directory = h("input", { type: "text", id: "register-dir", autocomplete: "off",
      placeholder: "/data/runs" });
    this.format = h("select", { id: "register-format", onchange: () => this.showFile() },
      FORMATS.map(([value, label]) => h("option", { value }, label)));
    this.file = h("input", { type: "text", id: "register-file", autocomplete: "off",
      placeholder: "qwen2_7b_grpo.jsonl" });
    this.fileField = h("label", { class: "meta-field", hidden: true }, "File (optional)", this.file,
      h("span", { class: "muted" }, "verl names it after the experiment; empty: {job id}.jsonl."));
    this.error = h("p", { class: "error-text", id: "register-error" });
    this.save = h("button", { type: "button", id: "register-save", onclick: () => this.submit() }, "Register");
    this.root = h("dialog", { id: "register-dialog", class: "confirm-dialog meta-dialog" },
      h("form", { method: "dialog" },
        h("p", { class: "meta-title" }, "Register a run"),
        h("label", { class: "meta-field" }, "Job id", this.jobId),
        h("label", { class: "meta-field" }, "Directory", this.directory,
          h("span", { class: "muted" }, "Where its file is, on the server's machine.")),
        h("label", { class: "meta-field" }, "Logged by", this.format),
        this.fileField,
        this.error,
        h("div", { class: "dialog-buttons" },
          h("button", { type: "submit", value: "cancel", id: "register-cancel" }, "Cancel"),
          this.save)));
  }

  showFile() {
    this.fileField.hidden = this.format.value !== "verl_file";
  }

  open() {
    this.showFile();
    this.error.textContent = "";
    this.save.disabled = false;
    this.root.showModal();
    this.jobId.focus();
  }

  async submit() {
    const { body, error } = registerBody({ jobId: this.jobId.value, directory: this.directory.value,
      format: this.format.value, file: this.fileField.hidden ? "" : this.file.value });
    if (!body) {
      this.error.textContent = error;
      return;
    }
    this.save.disabled = true;
    try {
      const job = await api("/jobs", { method: "POST", body });
      this.root.close();
      this.onRegistered(job);
    } catch (failure) {
      this.error.textContent = `Not registered: ${failure.message}`;
    } finally {
      this.save.disabled = false;
    }
  }
}
