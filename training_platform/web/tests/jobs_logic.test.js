// Unit tests of static/js/jobs_logic.js (`npm test`, docs/dashboard.md): the jobs
// list's filters and selection in the URL, its API query, grouping by project, the
// 20-run cap, tags as typed and the PATCH of a run's name, tags and notes.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  filtersActive,
  groupByProject,
  ingesterLabel,
  sourceLabel,
  jobsApiFilters,
  jobsHash,
  metaPatch,
  parseJobsState,
  parseTags,
  toggleSelection,
} from "../static/js/jobs_logic.js";
import { hashQuery } from "../static/js/url_state.js";

const empty = () => parseJobsState("");

describe("jobs list state in the URL", () => {
  test("nothing set: #/", () => {
    assert.deepEqual(empty(), { q: "", status: [], health: "", tags: [], project: "", selected: [] });
    assert.equal(jobsHash(empty()), "#/");
    assert.equal(filtersActive(empty()), false);
  });

  test("round trip of every filter and the selection", () => {
    const state = { q: "lr 3e-6", status: ["running", "stalled"], health: "warning",
      tags: ["grpo", "a,b"], project: "math grpo", selected: ["run-a", "run-b"] };
    const hash = jobsHash(state);
    assert.equal(hash, "#/?q=lr%203e-6&status=running,stalled&health=warning&tag=grpo,a%2Cb&project=math%20grpo&sel=run-a,run-b");
    assert.deepEqual(parseJobsState(hashQuery(hash)), state);
    assert.equal(filtersActive(state), true);
  });

  test("unknown statuses and healths are dropped; the selection is capped at 20", () => {
    const ids = Array.from({ length: 25 }, (_, i) => `r${i}`).join(",");
    const state = parseJobsState(`status=running,bogus&health=sick&sel=${ids}`);
    assert.deepEqual(state.status, ["running"]);
    assert.equal(state.health, "");
    assert.equal(state.selected.length, 20);
  });

  test("the API query repeats status and tag", () => {
    const state = { ...empty(), q: "qwen", status: ["running", "failed"], health: "ok",
      tags: ["grpo", "x y"], project: "p" };
    assert.equal(jobsApiFilters(state), "q=qwen&status=running&status=failed&health=ok&tag=grpo&tag=x+y&project=p");
    assert.equal(jobsApiFilters(empty()), "");
  });
});

describe("groupByProject", () => {
  test("groups by name, order kept inside a group, no project last", () => {
    const jobs = [
      { job_id: "1", project: "zeta" }, { job_id: "2", project: null }, { job_id: "3", project: "Alpha" },
      { job_id: "4", project: "zeta" }, { job_id: "5" }, { job_id: "6", project: "" },
    ];
    const groups = groupByProject(jobs);
    assert.deepEqual(groups.map((g) => g.project), ["Alpha", "zeta", null]);
    assert.deepEqual(groups[1].jobs.map((j) => j.job_id), ["1", "4"]);
    assert.deepEqual(groups[2].jobs.map((j) => j.job_id), ["2", "5", "6"]);
    assert.deepEqual(groupByProject([]), []);
  });
});

describe("toggleSelection", () => {
  test("adds and removes", () => {
    assert.deepEqual(toggleSelection(["a"], "b"), { selected: ["a", "b"], refused: false });
    assert.deepEqual(toggleSelection(["a", "b"], "a"), { selected: ["b"], refused: false });
  });

  test("the 21st run is refused, the selection unchanged; removing still works", () => {
    const twenty = Array.from({ length: 20 }, (_, i) => `r${i}`);
    const result = toggleSelection(twenty, "r20");
    assert.equal(result.refused, true);
    assert.equal(result.selected, twenty);
    assert.equal(toggleSelection(twenty, "r3").selected.length, 19);
    assert.equal(toggleSelection(["a"], "b", 1).refused, true);
  });
});

describe("editing a run's name, tags and notes", () => {
  const job = { job_id: "a", name: "lr 3e-6", tags: ["grpo"], notes: null };

  test("tags as typed", () => {
    assert.deepEqual(parseTags(" grpo, baseline ,,grpo "), ["grpo", "baseline"]);
    assert.deepEqual(parseTags(""), []);
  });

  test("nothing changed: no request", () => {
    assert.equal(metaPatch(job, { name: "lr 3e-6 ", tags: "grpo", notes: "  " }), null);
  });

  test("only the changed fields are sent", () => {
    assert.deepEqual(metaPatch(job, { name: "baseline", tags: "grpo", notes: "" }), { name: "baseline" });
    assert.deepEqual(metaPatch(job, { name: "lr 3e-6", tags: "grpo, best", notes: "hacks the reward\n" }),
      { tags: ["grpo", "best"], notes: "hacks the reward\n" });
  });

  test("an emptied name goes back to the run file; emptied notes are cleared; no tags is []", () => {
    assert.deepEqual(metaPatch({ ...job, notes: "old" }, { name: "", tags: "", notes: "" }),
      { name: null, tags: [], notes: null });
  });

  test("a run without metadata", () => {
    assert.deepEqual(metaPatch({ job_id: "b" }, { name: "x", tags: "", notes: "" }), { name: "x" });
  });
});

describe("the process that ingests a run", () => {
  test("named by host and pid, with the instance in the tooltip", () => {
    const job = { ingested_by: { instance_id: "gpu-api-1/4026:4242:ab12", hostname: "gpu-api-1", pid: 4242 } };
    const label = ingesterLabel(job);
    assert.equal(label.text, "via gpu-api-1:4242");
    assert.match(label.title, /process 4242 on gpu-api-1 \(gpu-api-1\/4026:4242:ab12\)/);
  });

  test("nothing on one process or while nobody holds it", () => {
    assert.equal(ingesterLabel({ ingested_by: null }), null);
    assert.equal(ingesterLabel({}), null);
  });
});

describe("sourceLabel", () => {
  test("where the records are read, and which tool logged them", () => {
    assert.equal(sourceLabel({ source: "local", format: "platform" }), "local");
    assert.equal(sourceLabel({ source: "ssh", ssh: { host: "gpu-3" }, format: "platform" }), "ssh gpu-3");
    assert.equal(sourceLabel({ source: "local", format: "tensorboard" }), "TensorBoard · local");
    assert.equal(sourceLabel({ source: "tracking", format: "mlflow" }), "MLflow · tracking database");
    assert.equal(sourceLabel({ source: "tracking", format: "mlflow", tracking_uri: "sqlite:////d/m.db" }),
      "MLflow · tracking database");
    assert.equal(sourceLabel({ source: "tracking", format: "mlflow", tracking_uri: "file:///d/mlruns" }),
      "MLflow · file store");
    assert.equal(sourceLabel({ source: "tracking", format: "mlflow", tracking_uri: "http://127.0.0.1:5000" }),
      "MLflow · tracking server");
    assert.equal(sourceLabel({ source: "ssh", ssh: { host: "gpu-3" }, format: "mlflow" }), "MLflow · ssh gpu-3");
    assert.equal(sourceLabel({ source: "local", format: "wandb" }), "W&B · local");
    assert.equal(sourceLabel({ source: "local" }), "local"); // an older server: no format
  });
});
