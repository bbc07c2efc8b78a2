// Unit tests of static/js/register_form.js (`npm test`): the body of `POST /api/jobs`
// from the register dialog's fields, and what an incomplete form says.
import assert from "node:assert/strict";
import { test } from "node:test";

import { FORMATS, registerBody } from "../static/js/register_form.js";

test("the fields trimmed into the request body", () => {
  assert.deepEqual(registerBody({ jobId: " grpo-a ", directory: " /data/runs ", format: "verl_file" }),
    { body: { job_id: "grpo-a", metrics_dir: "/data/runs", format: "verl_file" } });
});

test("a verl file's name goes with its format only", () => {
  assert.deepEqual(registerBody({ jobId: "a", directory: "/d", format: "verl_file", file: " x.jsonl " }),
    { body: { job_id: "a", metrics_dir: "/d", format: "verl_file", file: "x.jsonl" } });
  assert.match(registerBody({ jobId: "a", directory: "/d", format: "tensorboard", file: "x" }).error,
    /file logger/);
});

test("a missing job id or directory says which", () => {
  assert.match(registerBody({ jobId: " ", directory: "/d", format: "platform" }).error, /job id/);
  assert.match(registerBody({ jobId: "a", directory: "", format: "platform" }).error, /directory/);
});

test("the formats offered are the API's", () => {
  assert.deepEqual(FORMATS.map(([value]) => value), ["platform", "verl_file", "tensorboard", "wandb", "trackio", "mlflow"]);
});

test("Trackio takes a project and a run; MLflow a tracking database and a run id, no directory", () => {
  assert.deepEqual(registerBody({ jobId: "t", format: "trackio", directory: "/tk", project: "rl", run: "r1" }),
    { body: { job_id: "t", format: "trackio", metrics_dir: "/tk", project: "rl", run: "r1" } });
  assert.match(registerBody({ jobId: "t", format: "trackio", directory: "/tk", project: "rl" }).error, /run's name/);
  assert.deepEqual(registerBody({ jobId: "m", format: "mlflow", trackingUri: " sqlite:////d/m.db ", runId: "abc" }),
    { body: { job_id: "m", format: "mlflow", tracking_uri: "sqlite:////d/m.db", run_id: "abc" } });
  assert.match(registerBody({ jobId: "m", format: "mlflow", trackingUri: "sqlite:////d/m.db" }).error, /run id/);
  assert.match(registerBody({ jobId: "m", format: "mlflow", directory: "/d", trackingUri: "x", runId: "y" }).error,
    /does not take a directory/);
});
