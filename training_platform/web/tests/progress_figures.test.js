// Unit tests of the jobs list's and status panel's progress figures
// (static/js/jobs_logic.js): each figure named by its source, one consistent story.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  progressFigures, progressTitle, sparseRecords, storedText, storedTitle,
} from "../static/js/jobs_logic.js";

const job = (fields) => ({ current_step: null, latest_step: null, total_steps: null, metrics_count: 0, ...fields });

describe("progress figures", () => {
  test("the bar's step is the furthest either source reached", () => {
    // The run: status file at 251, stored metrics at 253.
    const ahead = progressFigures(job({ current_step: 251, latest_step: 253, total_steps: 3000, metrics_count: 254 }));
    assert.deepEqual(ahead, { step: 253, total: 3000, trainer: 251, stored: 253, records: 254 });
    assert.equal(progressFigures(job({ current_step: 260, latest_step: 253 })).step, 260);
    assert.equal(progressFigures(job({ latest_step: 9 })).step, 9);
    assert.equal(progressFigures(job({ current_step: 4 })).step, 4);
    assert.equal(progressFigures(job({})).step, null);
    assert.equal(progressFigures(job({ current_step: -1, total_steps: 0 })).total, null);
  });

  test("the tooltip names what each source says", () => {
    const figures = progressFigures(job({ current_step: 251, latest_step: 253, total_steps: 3000 }));
    assert.equal(progressTitle(figures, "running"),
      "Step 253 of 3,000: the furthest step known.\nTrainer's status file: step 251.\nLatest stored record: step 253.");
    assert.match(progressTitle(progressFigures(job({ current_step: 9, latest_step: 9, total_steps: 10 })), "completed"),
      /^Completed: 10 steps\./);
    assert.equal(progressTitle(progressFigures(job({})), "pending"),
      "No step known yet.\nTrainer's status file: no step.\nStored metrics: none yet.");
  });
});

describe("stored records", () => {
  test("the count and the latest step, together", () => {
    assert.equal(storedText(progressFigures(job({ latest_step: 110, metrics_count: 81 }))), "81 records, up to step 110");
    assert.equal(storedText(progressFigures(job({ latest_step: 0, metrics_count: 1 }))), "1 record, at step 0");
    assert.equal(storedText(progressFigures(job({}))), "no records stored yet");
    assert.equal(storedText(progressFigures(job({ latest_step: 2999, metrics_count: 3000 }))), "3,000 records, up to step 2,999");
  });

  test("fewer records than steps is said to be normal", () => {
    const sparse = progressFigures(job({ latest_step: 110, metrics_count: 81 }));
    assert.equal(sparseRecords(sparse), true);
    assert.match(storedTitle(sparse), /^81 metric records stored, the latest at step 110\. Fewer records than steps is normal/);
    const every = progressFigures(job({ latest_step: 9, metrics_count: 10 }));
    assert.equal(sparseRecords(every), false);
    assert.equal(storedTitle(every), "10 metric records stored, the latest at step 9.");
    assert.equal(storedTitle(progressFigures(job({}))), "No metric records stored yet.");
  });
});
