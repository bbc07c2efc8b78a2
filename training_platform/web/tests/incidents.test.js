// Unit tests of static/js/incidents.js: incident spans and episodes (`npm test`).
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { EPISODE_STEPS, groupEpisodes, incidentSpan, spanText } from "../static/js/incidents.js";

describe("incidentSpan", () => {
  test("reaches from the onset to the last step its condition held", () => {
    assert.deepEqual(incidentSpan({ step: 401, end_step: 1499 }, 1500), [401, 1499]);
  });
  test("a one-off, or a row with no extent, is its step alone", () => {
    assert.deepEqual(incidentSpan({ step: 712, end_step: 712 }, 1500), [712, 712]);
    assert.deepEqual(incidentSpan({ step: 712 }, 1500), [712, 712]);
    assert.deepEqual(incidentSpan({ step: 712, end_step: null }, 1500), [712, 712]);
  });
  test("an ongoing incident stays open to the data's last step", () => {
    assert.deepEqual(incidentSpan({ step: 401, end_step: 450, ongoing: true }, 600), [401, 600]);
    assert.deepEqual(incidentSpan({ step: 401, ongoing: true }, NaN), [401, 401]);
  });
  test("an end before the onset (a bad row) is ignored", () => {
    assert.deepEqual(incidentSpan({ step: 40, end_step: 3 }, 100), [40, 40]);
  });
});

describe("spanText", () => {
  test("says how long it lasted", () => {
    assert.equal(spanText({ step: 712, end_step: 712 }), "step 712");
    assert.equal(spanText({ step: 401, end_step: 1499 }), "steps 401–1,499");
    assert.equal(spanText({ step: 401, end_step: 450, ongoing: true }), "steps 401–450, ongoing");
  });
});

describe("groupEpisodes", () => {
  test("chains onsets within EPISODE_STEPS of each other, in step order", () => {
    const steps = [712, 401, 403, 402, 414, 419, 430, 403];
    const episodes = groupEpisodes(steps.map((step) => ({ step })));
    assert.deepEqual(episodes.map((e) => [e.step, e.parts.map((p) => p.step)]), [
      [401, [401, 402, 403, 403]],
      [414, [414, 419]],
      [430, [430]],
      [712, [712]],
    ]);
  });
  test("the boundary: exactly EPISODE_STEPS apart still chains, one more does not", () => {
    const chained = groupEpisodes([{ step: 0 }, { step: EPISODE_STEPS }]);
    assert.equal(chained.length, 1);
    const apart = groupEpisodes([{ step: 0 }, { step: EPISODE_STEPS + 1 }]);
    assert.equal(apart.length, 2);
  });
  test("nothing in, nothing out", () => {
    assert.deepEqual(groupEpisodes([]), []);
  });
});
