// The Compare view's replay bar: the chosen runs replayed together on the view's x
// axis, on one clock (compare_replay_logic.js), with play/pause, speed, a seek slider,
// the progress and where each run stands. The bar owns the clock and its animation
// frames; the view (compare_view.js) asks it for the position and redraws the charts
// when it says the position moved.

import { h } from "./format.js";
import {
  REPLAY_SPEEDS, ReplayClock, fmtReplayX, fmtSpeed, progressText, replaySpan, runPositions,
} from "./compare_replay_logic.js";
import { swatch } from "./run_labels.js";

export class ReplayBar {
  /**
   * @param view  {runs(): the runs (column stores with jobId, label, color),
   *               mode(): the x axis, onMove(): the position moved (or the replay ended)}
   */
  constructor(view) {
    this.view = view;
    this.clock = new ReplayClock();
    this.mode = null; // the x axis the replay runs on: another one ends it
    this.frame = null;
    this.playButton = h("button", { type: "button", id: "compare-replay-play", onclick: () => this.toggle() }, "▶ Replay");
    this.exitButton = h("button", { type: "button", id: "compare-replay-exit", disabled: true,
      title: "Show the whole runs again", onclick: () => this.exit() }, "Exit replay");
    this.speedSelect = h("select", { id: "compare-replay-speed", "aria-label": "Replay speed",
      onchange: () => this.setSpeed(Number(this.speedSelect.value)) },
      REPLAY_SPEEDS.map((speed) => h("option", { value: String(speed), selected: speed === 1 }, fmtSpeed(speed))));
    this.seek = h("input", { type: "range", id: "compare-replay-seek", min: "0", max: "1", step: "any", value: "0",
      "aria-label": "Replay position", oninput: () => this.seekTo(Number(this.seek.value)) });
    this.progress = h("span", { class: "cmp-replay-progress", id: "compare-replay-progress" }, "");
    this.runsLine = h("span", { class: "cmp-replay-runs muted", id: "compare-replay-runs" });
    this.root = h("div", { class: "toolbar cmp-replay", id: "compare-replay", "data-state": "off" },
      h("span", { class: "control", title: "Replay the runs together on this x axis: at 1× the whole comparison takes a minute" },
        "Replay ", this.playButton, this.speedSelect),
      h("span", { class: "control cmp-replay-seek" }, this.seek, this.progress),
      this.exitButton,
      this.runsLine);
    this.show();
  }

  /** Where the charts are cut (x on the view's axis), or null: no replay, everything shown. */
  position() {
    return this.clock.position();
  }

  /**
   * The runs or the x axis changed (a load, a live record): the clock's span follows
   * the runs, and a change of the x axis ends the replay (its position meant another unit).
   */
  refresh() {
    if (this.mode !== null && this.mode !== this.view.mode()) this.exit({ quiet: true });
    this.clock.setSpan(replaySpan(this.view.runs(), this.view.mode()));
    this.show();
  }

  toggle() {
    if (this.clock.state === "playing") {
      this.clock.pause();
    } else {
      this.mode = this.view.mode();
      this.clock.setSpan(replaySpan(this.view.runs(), this.view.mode()));
      this.clock.play();
    }
    this.moved();
  }

  setSpeed(speed) {
    this.clock.setSpeed(speed);
    this.show();
  }

  seekTo(x) {
    if (this.mode === null) this.mode = this.view.mode();
    this.clock.setSpan(replaySpan(this.view.runs(), this.view.mode()));
    this.clock.seek(x);
    this.moved();
  }

  exit({ quiet = false } = {}) {
    this.clock.stop();
    this.mode = null;
    if (quiet) this.show();
    else this.moved();
  }

  destroy() {
    this.clock.stop();
    if (this.frame !== null) cancelAnimationFrame(this.frame);
    this.frame = null;
  }

  /** The position moved: the view redraws, the bar follows, and a playing clock ticks on. */
  moved() {
    this.view.onMove();
    this.show();
    if (this.clock.state === "playing" && this.frame === null) {
      this.frame = requestAnimationFrame(() => this.tick());
    }
  }

  tick() {
    this.frame = null;
    if (this.clock.state !== "playing") return;
    this.clock.position(); // may turn "ended": that frame still draws the end
    this.moved();
  }

  show() {
    const position = this.clock.position(); // first: it may turn "playing" into "ended"
    const { state, span } = this.clock;
    const mode = this.mode ?? this.view.mode();
    this.root.dataset.state = state;
    this.root.dataset.position = position === null ? "" : String(position);
    this.playButton.textContent = state === "playing" ? "❚❚ Pause" : state === "paused" ? "▶ Resume" : "▶ Replay";
    this.playButton.disabled = !span;
    this.exitButton.disabled = state === "off";
    this.speedSelect.value = String(this.clock.speed);
    this.seek.disabled = !span;
    if (span) {
      this.seek.min = String(span.start);
      this.seek.max = String(span.end);
      this.seek.value = String(position ?? span.end);
    }
    this.progress.textContent = state === "off" ? "whole runs"
      : `${progressText(mode, position, span)}${state === "ended" ? " · ended" : ""}`;
    if (state === "off") {
      this.runsLine.replaceChildren();
      return;
    }
    const runs = this.view.runs();
    const where = new Map(runPositions(runs, position, mode).map((p) => [p.jobId, p]));
    this.runsLine.replaceChildren(...runs.map((run) => {
      const p = where.get(run.jobId);
      let text = "no data";
      if (p.x !== null) text = !p.started ? "not started" : `${fmtReplayX(mode, p.x)}${p.ended ? " · ended" : ""}`;
      return h("span", { class: "cmp-replay-run", "data-job": run.jobId, "data-ended": String(p.ended) },
        swatch(run.color), `${run.label}: ${text}`);
    }));
  }
}
