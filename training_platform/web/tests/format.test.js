// Unit tests of static/js/format.js (`npm test`, docs/dashboard.md).
// The DOM helpers (h, statusBadge, progressBar) run against a tiny fake document
// installed for their tests only; the rest is plain functions.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  NONFINITE,
  breakable,
  counted,
  debounce,
  fmtAgo,
  fmtBytes,
  fmtClock,
  fmtNumber,
  fmtStep,
  fmtTime,
  frameThrottle,
  h,
  progressBar,
  statusBadge,
} from "../static/js/format.js";

describe("NONFINITE", () => {
  test("holds exactly the API's three non-finite strings", () => {
    assert.deepEqual([...NONFINITE].sort(), ["-Infinity", "Infinity", "NaN"]);
    assert.equal(NONFINITE.has("nan"), false);
    assert.equal(NONFINITE.has(Number.NaN), false);
  });
});

describe("fmtNumber", () => {
  test("missing values are a dash", () => {
    assert.equal(fmtNumber(null), "–");
    assert.equal(fmtNumber(undefined), "–");
  });

  test("the API's non-finite strings pass through", () => {
    assert.equal(fmtNumber("NaN"), "NaN");
    assert.equal(fmtNumber("Infinity"), "Infinity");
    assert.equal(fmtNumber("-Infinity"), "-Infinity");
  });

  test("non-finite numbers are named", () => {
    assert.equal(fmtNumber(Number.NaN), "NaN");
    assert.equal(fmtNumber(Infinity), "Infinity");
    assert.equal(fmtNumber(-Infinity), "-Infinity");
  });

  test("integers are exact, with thousands separators", () => {
    assert.equal(fmtNumber(0), "0");
    assert.equal(fmtNumber(7), "7");
    assert.equal(fmtNumber(-42), "-42");
    assert.equal(fmtNumber(123456), "123,456");
    assert.equal(fmtNumber(999999), "999,999");
  });

  test("fractions get four significant digits, without trailing zeros", () => {
    assert.equal(fmtNumber(3.14159), "3.142");
    assert.equal(fmtNumber(1.5), "1.5");
    assert.equal(fmtNumber(-2.25), "-2.25");
    assert.equal(fmtNumber(7.1), "7.1");
    assert.equal(fmtNumber(10.0001), "10");
    assert.equal(fmtNumber(100.04), "100");
    assert.equal(fmtNumber(0.1 + 0.2), "0.3");
    assert.equal(fmtNumber(0.00123), "0.00123");
    assert.equal(fmtNumber(0.001), "0.001");
  });

  test("the integer part keeps its zeros (1200.3 is not 12)", () => {
    assert.equal(fmtNumber(1200.3), "1,200");
    assert.equal(fmtNumber(1000.4), "1,000");
    assert.equal(fmtNumber(999.96), "1,000");
    assert.equal(fmtNumber(12345.6), "12,350");
    assert.equal(fmtNumber(-5000.2), "-5,000");
  });

  test("very large and very small magnitudes switch to exponent notation", () => {
    assert.equal(fmtNumber(1e6), "1.000e+6");
    assert.equal(fmtNumber(-1234567), "-1.235e+6");
    assert.equal(fmtNumber(0.000999), "9.990e-4");
    assert.equal(fmtNumber(2.5e-7), "2.500e-7");
    assert.equal(fmtNumber(-2.5e-7), "-2.500e-7");
  });
});

describe("fmtStep", () => {
  test("formats steps with separators, a dash when missing", () => {
    assert.equal(fmtStep(null), "–");
    assert.equal(fmtStep(undefined), "–");
    assert.equal(fmtStep(0), "0");
    assert.equal(fmtStep(1234567), "1,234,567");
    assert.equal(fmtStep("42"), "42");
  });
});

describe("fmtAgo", () => {
  const now = 1_000_000;
  test("no time is never", () => {
    assert.equal(fmtAgo(null, now), "never");
    assert.equal(fmtAgo(undefined, now), "never");
    assert.equal(fmtAgo(0, now), "never");
  });

  test("picks the unit by the size of the gap", () => {
    assert.equal(fmtAgo(now, now), "just now");
    assert.equal(fmtAgo(now - 1.9, now), "just now");
    assert.equal(fmtAgo(now - 2, now), "2 s ago");
    assert.equal(fmtAgo(now - 89, now), "89 s ago");
    assert.equal(fmtAgo(now - 90, now), "2 min ago");
    assert.equal(fmtAgo(now - 5399, now), "90 min ago");
    assert.equal(fmtAgo(now - 5400, now), "2 h ago");
    assert.equal(fmtAgo(now - 129599, now), "36 h ago");
    assert.equal(fmtAgo(now - 129600, now), "2 d ago");
    assert.equal(fmtAgo(now - 10 * 86400, now), "10 d ago");
  });

  test("a time in the future (clock skew) is just now", () => {
    assert.equal(fmtAgo(now + 3600, now), "just now");
  });

  test("defaults to the current time", () => {
    assert.equal(fmtAgo(Date.now() / 1000 - 30), "30 s ago");
  });
});

describe("fmtTime", () => {
  test("no time is a dash", () => {
    assert.equal(fmtTime(null), "–");
    assert.equal(fmtTime(undefined), "–");
    assert.equal(fmtTime(0), "–");
  });

  test("takes Unix seconds, not milliseconds", () => {
    const local = new Date(2026, 0, 2, 3, 4, 5);
    assert.equal(fmtTime(local.getTime() / 1000), local.toLocaleString());
  });
});

describe("fmtClock", () => {
  // Built from local components, so the test holds in any time zone.
  const at = new Date(2026, 10, 24, 9, 5, 7).getTime() / 1000;

  test("seconds shown for spans under 10 minutes", () => {
    assert.equal(fmtClock(at, 0), "09:05:07");
    assert.equal(fmtClock(at, 599), "09:05:07");
  });

  test("minutes only from 10 minutes to a day", () => {
    assert.equal(fmtClock(at, 600), "09:05");
    assert.equal(fmtClock(at, 86_399), "09:05");
  });

  test("the date (month-day) from a day on", () => {
    assert.equal(fmtClock(at, 86_400), "11-24 09:05");
    assert.equal(fmtClock(new Date(2026, 0, 3, 23, 59, 59).getTime() / 1000, 1e7), "01-03 23:59");
  });
});

describe("fmtBytes", () => {
  test("B, KiB, MiB with one decimal", () => {
    assert.equal(fmtBytes(0), "0 B");
    assert.equal(fmtBytes(1023), "1023 B");
    assert.equal(fmtBytes(1024), "1.0 KiB");
    assert.equal(fmtBytes(1536), "1.5 KiB");
    assert.equal(fmtBytes(1024 ** 2 - 1), "1024.0 KiB");
    assert.equal(fmtBytes(1024 ** 2), "1.0 MiB");
    assert.equal(fmtBytes(3.25 * 1024 ** 2), "3.3 MiB");
  });
});

describe("frameThrottle", () => {
  let frames;
  let saved;
  before(() => {
    saved = globalThis.requestAnimationFrame;
    globalThis.requestAnimationFrame = (callback) => frames.push(callback);
  });
  after(() => {
    globalThis.requestAnimationFrame = saved;
  });

  test("runs once per frame however often it is asked, and again on the next", () => {
    frames = [];
    let calls = 0;
    const throttled = frameThrottle(() => {
      calls += 1;
    });
    throttled();
    throttled();
    throttled();
    assert.equal(frames.length, 1);
    assert.equal(calls, 0);
    frames.shift()();
    assert.equal(calls, 1);
    throttled();
    assert.equal(frames.length, 1);
    frames.shift()();
    assert.equal(calls, 2);
  });
});

describe("debounce", () => {
  let timers;
  let nextId;
  let saved;
  before(() => {
    saved = [globalThis.setTimeout, globalThis.clearTimeout];
    globalThis.setTimeout = (callback, ms) => {
      nextId += 1;
      timers.set(nextId, { callback, ms });
      return nextId;
    };
    globalThis.clearTimeout = (id) => timers.delete(id);
  });
  after(() => {
    [globalThis.setTimeout, globalThis.clearTimeout] = saved;
  });

  test("only the last call of a burst runs, with its arguments, after the delay", () => {
    timers = new Map();
    nextId = 0;
    const seen = [];
    const debounced = debounce((...args) => seen.push(args), 250);
    debounced(1);
    debounced(2, "b");
    debounced(3, "c");
    assert.equal(timers.size, 1);
    const [{ callback, ms }] = timers.values();
    assert.equal(ms, 250);
    assert.deepEqual(seen, []);
    callback();
    assert.deepEqual(seen, [[3, "c"]]);
  });
});

// A fake document just big enough for h(): elements record what h() did to them.
class FakeNode {}

class FakeText extends FakeNode {
  constructor(text) {
    super();
    this.textContent = text;
  }
}

class FakeElement extends FakeNode {
  constructor(tag) {
    super();
    this.tagName = tag;
    this.attributes = {};
    this.children = [];
    this.listeners = {};
    this.dataset = {};
    this.style = { cssText: "" };
  }

  setAttribute(name, value) {
    this.attributes[name] = value;
  }

  addEventListener(type, listener) {
    this.listeners[type] = listener;
  }

  append(...nodes) {
    this.children.push(...nodes);
  }

  get textContent() {
    return this.children.map((child) => child.textContent).join("");
  }
}

describe("DOM helpers", () => {
  let saved;
  before(() => {
    saved = [globalThis.document, globalThis.Node];
    globalThis.document = {
      createElement: (tag) => new FakeElement(tag),
      createTextNode: (text) => new FakeText(text),
    };
    globalThis.Node = FakeNode;
  });
  after(() => {
    [globalThis.document, globalThis.Node] = saved;
  });

  describe("h", () => {
    test("sets attributes, skipping empty ones; true is a bare attribute", () => {
      const element = h("input", { name: "n", min: 0, hidden: true, disabled: false, id: null, title: undefined });
      assert.equal(element.tagName, "input");
      assert.deepEqual(element.attributes, { name: "n", min: "0", hidden: "" });
    });

    test("on* functions are listeners, dataset and style go through their APIs", () => {
      const click = () => {};
      const element = h("a", { onclick: click, dataset: { chart: "losses" }, style: "width:5%" });
      assert.equal(element.listeners.click, click);
      assert.deepEqual(element.dataset, { chart: "losses" });
      assert.equal(element.style.cssText, "width:5%");
      assert.deepEqual(element.attributes, {});
    });

    test("children are text nodes (never HTML), an array of them flattened, empties skipped", () => {
      const child = h("b", {}, "bold");
      const element = h("p", {}, "<img src=x onerror=alert(1)>", [child, null, 0], undefined, false, 12);
      assert.equal(element.children.length, 4);
      assert.ok(element.children[0] instanceof FakeText);
      assert.equal(element.children[0].textContent, "<img src=x onerror=alert(1)>");
      assert.equal(element.children[1], child);
      assert.equal(element.children[2].textContent, "0");
      assert.equal(element.textContent, "<img src=x onerror=alert(1)>bold012");
    });
  });

  test("breakable: a snake_case name may wrap after its underscores only", () => {
    const parts = breakable("gradient_explosion");
    assert.equal(parts.length, 3);
    assert.equal(parts[0], "gradient_");
    assert.equal(parts[1].tagName, "wbr");
    assert.equal(parts[2], "explosion");
    const cell = h("div", {}, parts);
    assert.equal(cell.textContent, "gradient_explosion"); // the text itself is unchanged
    assert.deepEqual(breakable("nan_inf_x").map((p) => p.tagName ?? p), ["nan_", "wbr", "inf_", "wbr", "x"]);
    assert.deepEqual(breakable("truncation"), ["truncation"]);
  });

  test("statusBadge", () => {
    const badge = statusBadge("running");
    assert.equal(badge.tagName, "span");
    assert.deepEqual(badge.attributes, { class: "badge status-running", "data-status": "running" });
    assert.equal(badge.textContent, "running");
  });

  describe("progressBar", () => {
    const parts = (cell) => {
      const [bar, label] = cell.children;
      return {
        label: label.textContent,
        title: bar.attributes.title,
        fraction: bar.attributes["data-fraction"],
        width: bar.children[0].style.cssText,
      };
    };

    test("current / total with the percentage", () => {
      assert.deepEqual(parts(progressBar(350, 700)), {
        label: "350 / 700",
        title: "350 / 700 (50 %)",
        fraction: "0.5000",
        width: "width:50.0%",
      });
      assert.equal(parts(progressBar(12345, 100000)).label, "12,345 / 100,000");
    });

    test("the percentage is floored: 699 of 700 while running is 99 %", () => {
      const bar = parts(progressBar(699, 700, "running"));
      assert.equal(bar.title, "699 / 700 (99 %)");
      assert.equal(bar.fraction, "0.9986");
    });

    test("a completed run is full even when its last step (from 0) is total - 1", () => {
      assert.equal(parts(progressBar(699, 700, "completed")).title, "700 / 700 (100 %)");
      assert.equal(parts(progressBar(null, 700, "completed")).title, "700 / 700 (100 %)");
      assert.equal(parts(progressBar(900, 700, "completed")).label, "900 / 700");
    });

    test("the fraction is clamped to [0, 1]; a negative step is no step", () => {
      assert.equal(parts(progressBar(800, 700)).fraction, "1.0000");
      const negative = parts(progressBar(-1, 700));
      assert.equal(negative.label, "– / 700");
      assert.equal(negative.fraction, "0.0000");
    });

    test("without a total: the step alone, no percentage", () => {
      assert.deepEqual(parts(progressBar(5, null)), {
        label: "5",
        title: "5",
        fraction: "0.0000",
        width: "width:0.0%",
      });
      assert.equal(parts(progressBar(5, 0, "completed")).label, "5");
      assert.equal(parts(progressBar(null, null)).label, "–");
    });
  });
});

describe("counted", () => {
  test("says one noun in the singular, any other count in the plural", () => {
    assert.equal(counted(1, "anomaly", "anomalies"), "1 anomaly");
    assert.equal(counted(0, "anomaly", "anomalies"), "0 anomalies");
    assert.equal(counted(3, "sample"), "3 samples");
    assert.equal(counted(12345, "step"), "12,345 steps");
  });
});

