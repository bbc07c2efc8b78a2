// Unit tests of static/js/metric_groups.js (the "Add chart" picker's grouping and
// search) and the series titles of chart_specs.js (`npm test`, docs/dashboard.md).
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { customSpec, groupOf, seriesTitle } from "../static/js/chart_specs.js";
import { groupMetrics, listedKeys, matchesQuery, moveActive } from "../static/js/metric_groups.js";

const KEYS = [
  "extra.actor/entropy", "reward.mean", "loss.actor_loss", "kl.max", "mytool.score",
  "timing.rollout", "kl.mean", "performance.step_time", "gradient.actor_norm", "loss.critic_loss",
  "bare",
];

describe("seriesTitle", () => {
  test("writes the group and the field in words", () => {
    assert.equal(seriesTitle("reward.mean"), "Reward: mean");
    assert.equal(seriesTitle("loss.actor_loss"), "Loss: actor loss");
    assert.equal(seriesTitle("kl.max"), "KL: max");
    assert.equal(seriesTitle("timing.update_actor"), "Timing: update actor");
  });

  test("takes a fixed chart's title where that chart shows just this series", () => {
    assert.equal(seriesTitle("performance.step_time"), "Step time (s)");
    assert.equal(seriesTitle("extra.actor/entropy"), "Entropy");
  });

  test("names extras by their field and leaves an unknown group's name as it is", () => {
    assert.equal(seriesTitle("extra.response_length/mean"), "response length/mean");
    assert.equal(seriesTitle("mytool.score"), "mytool: score");
    assert.equal(seriesTitle("bare"), "bare");
  });

  test("is the title of a chart the reader added", () => {
    assert.equal(customSpec("reward.mean").title, "Reward: mean");
    assert.equal(customSpec("reward.mean").id, "custom:reward.mean");
  });
});

describe("groupMetrics", () => {
  test("lists the record's groups in their usual order, then others by name", () => {
    const groups = groupMetrics(KEYS);
    assert.deepEqual(groups.map((g) => g.group),
      ["loss", "reward", "kl", "gradient", "performance", "timing", "extra", "", "mytool"]);
    assert.deepEqual(groups.map((g) => g.title),
      ["Loss", "Reward", "KL", "Gradient", "Performance", "Timing", "Extra", "Other", "mytool"]);
    assert.deepEqual(groups[2].items, [{ key: "kl.max", title: "KL: max" }, { key: "kl.mean", title: "KL: mean" }]);
  });

  test("narrows the list to the keys matching every word typed, in key or title", () => {
    assert.deepEqual(listedKeys(groupMetrics(KEYS, "actor")),
      ["loss.actor_loss", "gradient.actor_norm", "extra.actor/entropy"]);
    assert.deepEqual(listedKeys(groupMetrics(KEYS, "KL MEAN")), ["kl.mean"]);
    assert.deepEqual(listedKeys(groupMetrics(KEYS, "step time")), ["performance.step_time"]);
    assert.deepEqual(groupMetrics(KEYS, "nothing like it"), []);
  });

  test("takes each key once", () => {
    assert.deepEqual(listedKeys(groupMetrics(["kl.mean", "kl.mean"])), ["kl.mean"]);
  });
});

describe("matchesQuery and groupOf", () => {
  test("an empty query matches everything", () => {
    assert.ok(matchesQuery("kl.mean", ""));
    assert.ok(matchesQuery("kl.mean", "   "));
    assert.ok(matchesQuery("kl.mean", null));
  });

  test("the group is what comes before the first dot", () => {
    assert.equal(groupOf("extra.a.b"), "extra");
    assert.equal(groupOf("bare"), "");
  });
});

describe("moveActive", () => {
  const keys = ["a", "b", "c"];
  test("starts from nothing: down is the first, up the last", () => {
    assert.equal(moveActive(keys, null, 1), "a");
    assert.equal(moveActive(keys, null, -1), "c");
  });

  test("moves and wraps around", () => {
    assert.equal(moveActive(keys, "a", 1), "b");
    assert.equal(moveActive(keys, "c", 1), "a");
    assert.equal(moveActive(keys, "a", -1), "c");
  });

  test("has nothing to move to in an empty list", () => {
    assert.equal(moveActive([], null, 1), null);
  });
});
