// Unit tests of static/js/run_config.js (`npm test`, docs/dashboard.md): the run
// page's config flattened to dotted keys, the search, the run file's other facts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  commandText, configRows, filterConfigRows, flattenConfig, runFacts, valueText,
} from "../static/js/run_config.js";

describe("flattenConfig", () => {
  test("nested objects become dotted keys; lists, scalars and empty objects are values", () => {
    assert.deepEqual(flattenConfig({
      optimizer: { lr: 0.001, betas: [0.9, 0.99], extra: {} },
      model: { name: "qwen", layers: { n: 24 } },
      seed: null,
    }), {
      "optimizer.lr": 0.001, "optimizer.betas": [0.9, 0.99], "optimizer.extra": {},
      "model.name": "qwen", "model.layers.n": 24, seed: null,
    });
  });

  test("no config, or one that is not an object, has no keys", () => {
    assert.deepEqual(flattenConfig(null), {});
    assert.deepEqual(flattenConfig({}), {});
    assert.deepEqual(flattenConfig([1, 2]), {});
  });
});

describe("configRows and filterConfigRows", () => {
  const rows = configRows({
    optimizer: { lr: 0.001, name: "AdamW" }, hub_token: "***", data: { path: "/data/GSM8K" }, flag: true,
  });

  test("rows are sorted by key, values as text", () => {
    assert.deepEqual(rows, [
      { key: "data.path", text: "/data/GSM8K" },
      { key: "flag", text: "true" },
      { key: "hub_token", text: "***" },
      { key: "optimizer.lr", text: "0.001" },
      { key: "optimizer.name", text: "AdamW" },
    ]);
  });

  test("the search matches keys and values, case-insensitively", () => {
    assert.deepEqual(filterConfigRows(rows, "OPTIM").map((r) => r.key), ["optimizer.lr", "optimizer.name"]);
    assert.deepEqual(filterConfigRows(rows, "adamw").map((r) => r.key), ["optimizer.name"]);
    assert.deepEqual(filterConfigRows(rows, "gsm8k").map((r) => r.key), ["data.path"]);
    assert.deepEqual(filterConfigRows(rows, "nothing like it"), []);
  });

  test("a blank search keeps every row", () => {
    assert.equal(filterConfigRows(rows, "").length, rows.length);
    assert.equal(filterConfigRows(rows, "   ").length, rows.length);
    assert.equal(filterConfigRows(rows, undefined).length, rows.length);
  });

  test("values: JSON for lists and objects, null as null", () => {
    assert.equal(valueText([1, "a"]), '[1,"a"]');
    assert.equal(valueText({}), "{}");
    assert.equal(valueText(null), "null");
  });
});

describe("runFacts", () => {
  test("command, git, host, framework as given (already masked by the server)", () => {
    const facts = runFacts({
      command: ["train.py", "--hub-token", "***"],
      git: { commit: "abc123", dirty: true },
      host: "node-7",
      framework: { name: "trl", version: "0.20.0" },
    });
    assert.deepEqual(facts, [
      ["Command", "train.py --hub-token ***"],
      ["Git commit", "abc123 (dirty: uncommitted changes)"],
      ["Host", "node-7"],
      ["Framework", "trl 0.20.0"],
    ]);
  });

  test("a clean tree, a string command, and nothing for what is absent", () => {
    assert.deepEqual(runFacts({ command: "python x.py", git: { commit: "f00", dirty: false } }), [
      ["Command", "python x.py"],
      ["Git commit", "f00"],
    ]);
    assert.deepEqual(runFacts(null), []);
    assert.equal(commandText(undefined), null);
  });
});
