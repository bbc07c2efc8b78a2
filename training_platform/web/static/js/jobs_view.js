// The jobs view: every job with status, progress, last update and anomalies.
//
// Kept current by polling GET /api/jobs every two seconds: one cheap query for all
// jobs, where a WebSocket per job would not scale to a page listing hundreds.

import { api, enc } from "./api.js";
import { fmtAgo, fmtStep, fmtTime, h, progressBar, statusBadge } from "./format.js";

const REFRESH_MS = 2000;

export class JobsView {
  constructor(root, setConnection) {
    this.root = root;
    this.setConnection = setConnection;
    this.timer = null;
    this.table = h("tbody", { id: "jobs-body" });
    this.note = h("p", { class: "muted" });
  }

  async start() {
    this.root.replaceChildren(
      h("div", { class: "page-head" }, h("h1", {}, "Training runs"), this.note),
      h("table", { class: "jobs" },
        h("thead", {}, h("tr", {}, ["job", "status", "progress", "latest step", "last update", "anomalies", "source"]
          .map((title) => h("th", {}, title)))),
        this.table));
    await this.refresh();
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  stop() {
    clearInterval(this.timer);
  }

  async refresh() {
    let body;
    try {
      body = await api("/jobs");
      this.setConnection("polling");
    } catch (error) {
      this.setConnection("reconnecting", error.message);
      return;
    }
    const jobs = body.jobs.slice().sort((a, b) => (b.updated_at ?? b.created_at) - (a.updated_at ?? a.created_at));
    this.note.textContent = jobs.length
      ? `${jobs.length} job${jobs.length === 1 ? "" : "s"} · updated every ${REFRESH_MS / 1000} s`
      : "No jobs yet: start a training run with PlatformCallback writing to PLATFORM_METRICS_DIR, or register one with POST /api/jobs.";
    this.table.replaceChildren(...jobs.map(row));
  }
}

function row(job) {
  const anomalies = job.anomaly_count
    ? h("span", { class: "badge anomaly-badge", title: job.anomaly_reason || "" }, `⚠ ${job.anomaly_count}`)
    : h("span", { class: "muted" }, "none");
  const source = job.source === "ssh" && job.ssh ? `ssh ${job.ssh.host}` : "local";
  return h("tr", { "data-job": job.job_id },
    h("td", {}, h("a", { href: `#/run/${enc(job.job_id)}`, class: "job-link" }, job.job_id)),
    h("td", {}, statusBadge(job.status)),
    h("td", {}, progressBar(job.current_step ?? job.latest_step, job.total_steps)),
    h("td", {}, fmtStep(job.latest_step)),
    h("td", { title: fmtTime(job.updated_at) }, fmtAgo(job.updated_at ?? job.last_synced_at)),
    h("td", {}, anomalies),
    h("td", { class: "muted" }, source));
}
