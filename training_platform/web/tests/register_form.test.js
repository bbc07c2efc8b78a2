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
  assert.deepEqual(FORMATS.map(([value]) => value), ["platform", "verl_file", "tensorboard", "wandb"]);
});
