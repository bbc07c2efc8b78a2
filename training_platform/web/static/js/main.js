// Entry point: a tiny hash router over the three views.
//
//   #/                 jobs
//   #/run/{job_id}     one run, live
//   #/playback/{job_id}  replay a stored run

import { h } from "./format.js";

// Views are imported dynamically: if the chart library is missing (npm ci not run),
// the page says so instead of staying blank.
let views = null;
async function loadViews() {
  if (!views) {
    const [jobs, run, playback] = await Promise.all([
      import("./jobs_view.js"), import("./run_view.js"), import("./playback_view.js"),
    ]);
    views = { JobsView: jobs.JobsView, RunView: run.RunView, PlaybackView: playback.PlaybackView };
  }
  return views;
}

function showBanner(text) {
  const banner = document.getElementById("banner");
  banner.textContent = text;
  banner.hidden = !text;
}

const viewRoot = document.getElementById("view");
const crumbs = document.getElementById("crumbs");
const connection = document.getElementById("connection");
let current = null;

function setConnection(state, detail = "") {
  connection.dataset.state = state;
  connection.textContent = state === "idle" ? "" : state;
  connection.title = detail || state;
}

function parseRoute() {
  const [, kind, id] = window.location.hash.replace(/^#/, "").split("/");
  if ((kind === "run" || kind === "playback") && id) return { kind, jobId: decodeURIComponent(id) };
  return { kind: "jobs" };
}

async function route() {
  if (current) current.stop();
  current = null;
  showBanner("");
  const { kind, jobId } = parseRoute();
  const jobsLink = h("a", { href: "#/" }, "jobs");
  crumbs.replaceChildren(jobsLink, ...(jobId ? [" / ", h("a", { href: `#/run/${encodeURIComponent(jobId)}` }, jobId)] : []),
    ...(kind === "playback" ? [" / playback"] : []));
  document.title = jobId ? `${jobId} · training_platform` : "training_platform";
  viewRoot.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let JobsView;
  let RunView;
  let PlaybackView;
  try {
    ({ JobsView, RunView, PlaybackView } = await loadViews());
  } catch (error) {
    viewRoot.replaceChildren(h("div", { class: "error-box" }, h("h1", {}, "The dashboard could not load"),
      h("p", {}, "Its chart library is probably not installed: run scripts/setup.sh ",
        "(it runs npm ci --prefix training_platform/web)."), h("p", { class: "muted" }, String(error))));
    return;
  }
  let view;
  if (kind === "run") view = new RunView(viewRoot, jobId, setConnection);
  else if (kind === "playback") view = new PlaybackView(viewRoot, jobId, setConnection);
  else view = new JobsView(viewRoot, setConnection);
  current = view;
  try {
    await view.start();
  } catch (error) {
    if (current === view) {
      viewRoot.replaceChildren(h("div", { class: "error-box" }, h("h1", {}, "Cannot show this page"), h("p", {}, error.message)));
    }
  }
}

window.addEventListener("hashchange", route);
route();
