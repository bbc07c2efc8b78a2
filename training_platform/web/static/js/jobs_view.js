// The jobs view: every job with status, health, progress, last update and anomalies.
//
// Kept current by polling GET /api/jobs every two seconds: one cheap query per page,
// where a WebSocket per job would not scale to a page listing hundreds. So a job's
// health badge turns to warning or critical within two seconds, no reload. It shows
// the most recently updated runs first, a page at a time ("more" adds a page): a
// thousand finished runs do not slow the list down.
// Deleting a run asks first, in a dialog that lives outside the table (the table is
// rebuilt on every refresh).

import { api, enc } from "./api.js";
import { fmtAgo, fmtStep, fmtTime, h, progressBar, statusBadge } from "./format.js";

const REFRESH_MS = 2000;
const PAGE = 100; // jobs per "more"
const MAX_PAGE = 500; // the most one GET /api/jobs answers

export class JobsView {
  constructor(root, setConnection) {
    this.root = root;
    this.setConnection = setConnection;
    this.timer = null;
    this.table = h("tbody", { id: "jobs-body" });
    this.note = h("p", { class: "muted" });
    this.wanted = PAGE;
    this.more = h("button", { type: "button", class: "link", id: "jobs-more", hidden: true,
      onclick: () => this.showMore() }, `show ${PAGE} more`);
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
  }

  async start() {
    this.root.replaceChildren(
      h("div", { class: "page-head" }, h("h1", {}, "Training runs"), this.note),
      h("table", { class: "jobs" },
        h("thead", {}, h("tr", {}, ["job", "status", "health", "progress", "latest step", "last update", "anomalies", "source", ""]
          .map((title) => h("th", {}, title)))),
        this.table),
      h("p", {}, this.more),
      this.dialog);
    await this.refresh();
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  stop() {
    clearInterval(this.timer);
  }

  async refresh() {
    let jobs, more;
    try {
      ({ jobs, more } = await this.fetchJobs());
      this.setConnection("polling");
    } catch (error) {
      this.setConnection("reconnecting", error.message);
      return;
    }
    const count = `${jobs.length}${more ? "+" : ""} job${jobs.length === 1 ? "" : "s"}`;
    this.note.textContent = jobs.length
      ? `${count} · most recently updated first · updated every ${REFRESH_MS / 1000} s`
      : "No jobs yet: start a training run with PlatformCallback writing to PLATFORM_METRICS_DIR, or register one with POST /api/jobs.";
    this.more.hidden = !more;
    this.table.replaceChildren(...jobs.map((job) => row(job, () => this.askDelete(job.job_id))));
  }

  // The first `wanted` jobs, most recently updated first, in pages the API accepts.
  // `more`: the last page was full, so there may be more (the server orders them, so
  // pages line up; the job id breaks ties).
  async fetchJobs() {
    const jobs = [];
    while (jobs.length < this.wanted) {
      const size = Math.min(MAX_PAGE, this.wanted - jobs.length);
      const body = await api(`/jobs?order=updated&limit=${size}&offset=${jobs.length}`);
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
    await this.refresh();
  }
}

const HEALTH_TITLES = {
  ok: "no warning or critical anomaly, not stalled",
  warning: "a warning anomaly, a stalled run, or the trainer flagged an anomaly",
  critical: "a critical anomaly was found",
};

function healthBadge(health) {
  return h("span", { class: `badge health-badge health-${health}`, "data-health": health,
    title: HEALTH_TITLES[health] || "" }, health);
}

function row(job, onDelete) {
  const anomalies = job.anomaly_count
    ? h("span", { class: "badge anomaly-badge", title: job.anomaly_reason || "" }, `⚠ ${job.anomaly_count}`)
    : h("span", { class: "muted" }, "none");
  const source = job.source === "ssh" && job.ssh ? `ssh ${job.ssh.host}` : "local";
  return h("tr", { "data-job": job.job_id },
    h("td", {}, h("a", { href: `#/run/${enc(job.job_id)}`, class: "job-link" }, job.job_id)),
    h("td", {}, statusBadge(job.status)),
    h("td", {}, healthBadge(job.health)),
    h("td", {}, progressBar(job.current_step ?? job.latest_step, job.total_steps, job.status)),
    h("td", {}, fmtStep(job.latest_step)),
    h("td", { title: fmtTime(job.updated_at) }, fmtAgo(job.updated_at ?? job.last_synced_at)),
    h("td", {}, anomalies),
    h("td", { class: "muted" }, source),
    h("td", {}, h("button", { class: "link delete-job", title: `Delete run ${job.job_id}`,
      "aria-label": `Delete run ${job.job_id}`, onclick: onDelete }, "delete")));
}
