// A dialog to register a run whose files the platform does not find by itself
// (`POST /api/jobs`): the format its run is logged in and where it is: this
// platform's callback files, verl's file logger (with its file's name when it is
// not the job id's), a TensorBoard run directory or a W&B offline run (a directory
// on the server's machine), a Trackio run (Trackio's directory, project and run) or
// an MLflow run (its tracking URI -- a database, a file store or a tracking server --
// and run id; no directory) (docs/contract.md, "Runs logged by other tools"). SSH
// sources stay with the API for now.
//
// Like the run editor, it lives outside the jobs table that is redrawn on refresh.

import { api } from "./api.js";
import { h } from "./format.js";

export const FORMATS = [
  ["platform", "this platform's callback ({job_id}_metrics.jsonl)"],
  ["verl_file", "verl's file logger ({job_id}.jsonl, or the file named)"],
  ["tensorboard", "TensorBoard (the directory's events.out.tfevents.* files)"],
  ["wandb", "W&B offline run (an offline-run-* directory)"],
  ["trackio", "Trackio (its directory, a project and a run)"],
  ["mlflow", "MLflow (a tracking URI and a run id)"],
];

// Which fields each format takes besides the job id (the rest are hidden).
export const FIELDS = {
  platform: ["directory"], verl_file: ["directory", "file"], tensorboard: ["directory"],
  wandb: ["directory"], trackio: ["directory", "project", "run"], mlflow: ["trackingUri", "runId"],
};

/** The request body for the form's values; `error` with the reason when incomplete. */
export function registerBody({ jobId, format, ...values }) {
  const job_id = jobId.trim();
  if (!job_id) return { error: "A job id is needed: the file's name without its suffix." };
  const given = Object.fromEntries(Object.entries(values).map(([key, value]) => [key, (value ?? "").trim()]));
  const fields = FIELDS[format] ?? ["directory"];
  const stray = Object.keys(given).find((key) => given[key] && !fields.includes(key));
  if (stray === "file") return { error: "Only verl's file logger takes a file name." };
  if (stray) return { error: `${format} does not take a ${stray}.` };
  const missing = {
    directory: "A directory on the server's machine is needed.",
    project: "Trackio's project is needed.",
    run: "The run's name in that project is needed.",
    trackingUri: "The MLflow tracking URI (sqlite:///…, postgresql://…, file:///…/mlruns or http://…) is needed.",
    runId: "The MLflow run id is needed.",
  };
  const lacking = fields.find((key) => key !== "file" && !given[key]);
  if (lacking) return { error: missing[lacking] };
  const names = { directory: "metrics_dir", file: "file", project: "project", run: "run",
    trackingUri: "tracking_uri", runId: "run_id" };
  const body = { job_id, format };
  for (const key of fields) if (given[key]) body[names[key]] = given[key];
  return { body };
}

// Each field: its input's id, label, placeholder and hint.
const INPUTS = {
  directory: ["register-dir", "Directory", "/data/runs", "Where its files are, on the server's machine."],
  file: ["register-file", "File (optional)", "qwen2_7b_grpo.jsonl",
    "verl names it after the experiment; empty: {job id}.jsonl."],
  project: ["register-project", "Trackio project", "math-grpo", "Its database is {project}.db there."],
  run: ["register-run", "Trackio run", "brisk-sun-3", "The run's name in that project."],
  trackingUri: ["register-tracking-uri", "Tracking URI", "sqlite:////data/mlflow.db",
    "MLflow's store: sqlite:///<file>, postgresql://…, file:///<mlruns> or http(s)://<server>"],
  runId: ["register-run-id", "Run id", "151a458c3fa14e43ba3f6147cc5242e4", "The MLflow run's id."],
};

export class RegisterForm {
  /** @param onRegistered(job) called with the job as the server answered it. */
  constructor(onRegistered) {
    this.onRegistered = onRegistered;
    this.jobId = h("input", { type: "text", id: "register-job-id", maxlength: "128", autocomplete: "off",
      placeholder: "grpo-qwen-7b" });
    this.format = h("select", { id: "register-format", onchange: () => this.showFields() },
      FORMATS.map(([value, label]) => h("option", { value }, label)));
    this.inputs = {};
    this.labels = {};
    for (const [key, [id, label, placeholder, hint]] of Object.entries(INPUTS)) {
      this.inputs[key] = h("input", { type: "text", id, autocomplete: "off", placeholder });
      this.labels[key] = h("label", { class: "meta-field" }, label, this.inputs[key],
        h("span", { class: "muted" }, hint));
    }
    this.error = h("p", { class: "error-text", id: "register-error" });
    this.save = h("button", { type: "button", id: "register-save", onclick: () => this.submit() }, "Register");
    this.root = h("dialog", { id: "register-dialog", class: "confirm-dialog meta-dialog" },
      h("form", { method: "dialog" },
        h("p", { class: "meta-title" }, "Register a run"),
        h("label", { class: "meta-field" }, "Job id", this.jobId),
        h("label", { class: "meta-field" }, "Logged by", this.format),
        Object.values(this.labels),
        this.error,
        h("div", { class: "dialog-buttons" },
          h("button", { type: "submit", value: "cancel", id: "register-cancel" }, "Cancel"),
          this.save)));
  }

  /** Only the fields the chosen format takes. */
  showFields() {
    const fields = FIELDS[this.format.value] ?? ["directory"];
    for (const [key, label] of Object.entries(this.labels)) label.hidden = !fields.includes(key);
  }

  open() {
    this.showFields();
    this.error.textContent = "";
    this.save.disabled = false;
    this.root.showModal();
    this.jobId.focus();
  }

  async submit() {
    const values = Object.fromEntries(Object.entries(this.inputs)
      .map(([key, input]) => [key, this.labels[key].hidden ? "" : input.value]));
    const { body, error } = registerBody({ jobId: this.jobId.value, format: this.format.value, ...values });
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
