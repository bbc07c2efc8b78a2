// Entry point: a tiny hash router over the three views.
//
//   #/                 jobs
//   #/run/{job_id}     one run, live
//   #/playback/{job_id}  replay a stored run
//   #/compare?jobs=a,b   runs side by side (compare_view.js; the jobs list takes a query too)

import { h } from "./format.js";

// Each view is imported when first shown, and the chart library is loaded by
// charts.js itself (it survives its absence): a missing or broken asset costs
// the charts, never the jobs list or a run's numbers.
const VIEW_MODULES = {
  jobs: () => import("./jobs_view.js").then((m) => m.JobsView),
  run: () => import("./run_view.js").then((m) => m.RunView),
  playback: () => import("./playback_view.js").then((m) => m.PlaybackView),
  compare: () => import("./compare_view.js").then((m) => m.CompareView),
};

const ASSET_FIX = "Reinstall the package (pip install --force-reinstall training-platform), "
  + "or in a source checkout run npm ci --prefix training_platform/web (scripts/setup.sh does).";

/** Say, above every view, when the chart library did not load, and how to fix it. */
async function checkChartLibrary() {
  let problem;
  try {
    problem = (await import("./charts.js")).chartLibraryError;
  } catch (error) {
    problem = error;
  }
  if (!problem) return;
  const banner = document.getElementById("asset-banner");
  banner.replaceChildren(h("strong", {}, "Charts are off: the chart library (uPlot) did not load. "),
    ASSET_FIX, h("span", { class: "muted" }, ` (${problem})`));
  banner.hidden = false;
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
let routing = 0; // bumped by every route(): a slower, older one must not install its view

function setConnection(state, detail = "") {
  connection.dataset.state = state;
  connection.textContent = state === "idle" ? "" : state;
  connection.title = detail || state;
}

function parseRoute() {
  const hash = window.location.hash.replace(/^#/, "");
  const at = hash.indexOf("?");
  const query = at < 0 ? "" : hash.slice(at + 1);
  const [, kind, id, tab] = (at < 0 ? hash : hash.slice(0, at)).split("/");
  if ((kind === "run" || kind === "playback") && id) return { kind, jobId: decodeURIComponent(id), tab: tab || "" };
  if (kind === "compare") return { kind, query };
  return { kind: "jobs", query };
}

async function route() {
  const next = parseRoute();
  // Another tab of the run on show (#/run/{id}/timing): switched in place, not reloaded.
  if (current && current.showTab && next.kind === "run" && current.jobId === next.jobId) {
    current.showTab(next.tab);
    return;
  }
  const mine = ++routing;
  if (current) current.stop();
  current = null;
  showBanner("");
  const { kind, jobId, query } = parseRoute();
  const jobsLink = h("a", { href: "#/" }, "jobs");
  crumbs.replaceChildren(jobsLink, ...(jobId ? [" / ", h("a", { href: `#/run/${encodeURIComponent(jobId)}` }, jobId)] : []),
    ...(kind === "playback" ? [" / playback"] : []), ...(kind === "compare" ? [" / compare"] : []));
  document.title = jobId ? `${jobId} · training_platform`
    : kind === "compare" ? "compare · training_platform" : "training_platform";
  viewRoot.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  let View;
  try {
    View = await VIEW_MODULES[kind]();
  } catch (error) {
    if (mine === routing) {
      viewRoot.replaceChildren(h("div", { class: "error-box" }, h("h1", {}, "This page could not load"),
        h("p", {}, "A file of the dashboard is missing or broken. ", ASSET_FIX),
        h("p", { class: "muted" }, String(error))));
    }
    return;
  }
  if (mine !== routing) return;
  const view = kind === "jobs" ? new View(viewRoot, setConnection, query)
    : new View(viewRoot, kind === "compare" ? query : jobId, setConnection);
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
checkChartLibrary();
