// The playback view: replay a stored run (or a range of it) at 0.1x to 10x, with
// pause/resume, speed changes and seeking while it plays; the charts redraw as the
// records stream in (`/api/monitoring/{job}/playback`). Like the live view, the
// charts carry anomaly markers and a side panel lists the anomalies, both only up
// to the step the playback has reached (a seek backwards takes them away again).

import { allAnomalies, api, enc, wsProtocols, wsUrl } from "./api.js";
import { ChartBoard } from "./board.js";
import { fmtStep, h } from "./format.js";
import { renderAnomalies } from "./panels.js";
import {
  MAX_SPEED, MIN_SPEED, fmtSpeed, parseSeek, parseSpeed, prePlayText, seriesWithValues,
} from "./playback_logic.js";
import { Columns } from "./series.js";

// Points asked for when a seek fills the charts up to its step: exact answers for any
// stretch this short, buckets (min/max kept) beyond.
const FILL_POINTS = 2000;

export class PlaybackView {
  constructor(root, jobId, setConnection) {
    this.root = root;
    this.jobId = jobId;
    this.setConnection = setConnection;
    this.socket = null;
    this.info = null;
    this.speed = 1; // what the server plays at (its answers say), never an unsent typed value
    this.seekPending = false; // records sent before the server took a seek are stale: dropped
    this.queue = Promise.resolve(); // messages and seek fills, one at a time, in order
    this.columns = new Columns();
    this.board = new ChartBoard({ syncKey: `playback:${jobId}` });
    this.anomalies = new StepAnomalies();
    this.shownAnomalies = null;
  }

  async start() {
    const [job, overview] = await Promise.all([
      api(`/jobs/${enc(this.jobId)}`),
      // Two points per series are enough to learn which series the run has at all.
      api(`/monitoring/${enc(this.jobId)}/metrics?max_points=2`).catch(() => null),
    ]);
    const input = (name, attrs) => h("input", { name, id: `playback-${name}`, ...attrs });
    const first = overview?.start_step ?? null;
    const last = overview?.end_step ?? null;
    const stepAttrs = { type: "number", min: String(first ?? 0), ...(last === null ? {} : { max: String(last) }) };
    this.startInput = input("start", { ...stepAttrs, placeholder: first === null ? "first" : fmtStep(first) });
    this.endInput = input("end", { ...stepAttrs, placeholder: last === null ? "last" : fmtStep(last) });
    this.speedInput = input("speed", {
      type: "number", min: String(MIN_SPEED), max: String(MAX_SPEED), step: "0.1", value: "1",
      title: `${fmtSpeed(MIN_SPEED)} to ${fmtSpeed(MAX_SPEED)}`,
      onkeydown: (e) => e.key === "Enter" && this.setSpeed(),
    });
    this.seekInput = input("seek", { ...stepAttrs, placeholder: "step", onkeydown: (e) => e.key === "Enter" && this.seekTyped() });
    this.playButton = h("button", { id: "playback-play", onclick: () => this.play() }, "Play");
    this.pauseButton = h("button", { id: "playback-pause", disabled: true, onclick: () => this.togglePause() }, "Pause");
    this.state = h("span", { id: "playback-state", class: "playback-state" }, "ready");
    this.fill = h("div", { class: "progress-fill", style: "width:0%" });
    this.bar = h("div", { class: "progress playback-bar", id: "playback-progress", title: "Click to seek", onclick: (e) => this.seekToClick(e) }, this.fill);
    this.position = h("span", { class: "muted", id: "playback-position" }, "");
    this.message = h("span", { id: "playback-message", role: "status", hidden: true });
    this.anomalyPanel = h("div", { class: "panel-body", id: "anomalies-panel" });
    this.anomalyCount = h("span", { class: "count", id: "anomaly-count" }, "0");
    // Before Play: one line saying so, in place of a board of empty charts.
    this.prePlay = h("p", { class: "waiting-note", id: "playback-not-started" }, prePlayText(job, first, last));
    this.notRecorded = h("p", { class: "folded-note muted", id: "playback-not-recorded", hidden: true });
    this.board.root.hidden = true;
    const speedControl = h("label", { class: "control" }, "Speed ×", this.speedInput,
      h("button", { id: "playback-speed-set", onclick: () => this.setSpeed() }, "Set"));
    this.root.replaceChildren(
      h("div", { class: "page-head" },
        h("h1", {}, `Playback · ${job.job_id}`),
        h("a", { class: "button", href: `#/run/${enc(this.jobId)}` }, "← Live view")),
      h("div", { class: "toolbar playback-controls" },
        h("label", { class: "control" }, "From step ", this.startInput),
        h("label", { class: "control" }, "to ", this.endInput),
        speedControl, this.playButton, this.pauseButton,
        h("label", { class: "control" }, "Seek to ", this.seekInput,
          h("button", { id: "playback-seek-go", onclick: () => this.seekTyped() }, "Go")),
        this.board.controls),
      h("div", { class: "playback-progress" }, this.bar, this.state, this.position, this.message),
      h("div", { class: "run-layout" },
        h("div", { class: "run-main" }, this.prePlay, this.notRecorded, this.board.root),
        h("aside", { class: "run-side" },
          h("section", { class: "panel" }, h("h2", {}, "Anomalies so far ", this.anomalyCount), this.anomalyPanel))));
    this.hideUnrecorded(seriesWithValues(overview));
    this.showAnomalies();
  }

  /** Charts for series the run never records (GPU memory on a CPU run) are not shown at all. */
  hideUnrecorded(keys) {
    if (!keys || !keys.size) return; // unknown, or nothing stored: every chart stays
    const hidden = [];
    for (const chart of this.board.charts.values()) {
      chart.setRunKeys(keys);
      if (chart.root.hidden) hidden.push(chart.spec.title);
    }
    this.notRecorded.textContent = hidden.length ? `Not recorded by this run, so not shown: ${hidden.join(", ")}.` : "";
    this.notRecorded.hidden = !hidden.length;
  }

  stop() {
    this.closeSocket();
    this.board.destroy();
    this.setConnection("idle");
  }

  closeSocket() {
    if (this.socket) this.socket.close(1000, "view closed");
    this.socket = null;
  }

  /** A line beside the state: a refusal (error) or what happened instead; "" clears it. */
  say(text, { error = false } = {}) {
    this.message.textContent = text;
    this.message.className = error ? "error-text" : "muted";
    this.message.hidden = !text;
  }

  /**
   * Play the chosen range from its start; or, with `seekTo` (a seek after the
   * playback ended and its socket closed), play it again from that step, keeping
   * the records before it: the server is asked to seek as soon as the socket opens,
   * and the records it sends before it took the seek are dropped.
   */
  play({ seekTo = null } = {}) {
    const parsed = parseSpeed(this.speedInput.value);
    if (parsed.error) {
      this.say(`${parsed.error} Not started.`, { error: true });
      return;
    }
    this.closeSocket();
    this.say("");
    if (seekTo === null) {
      this.columns = new Columns();
      this.board.setColumns(this.columns);
      this.showAnomalies();
      this.loadAnomalies();
    }
    const params = { speed: String(parsed.speed) };
    if (this.startInput.value !== "") params.start_step = this.startInput.value;
    if (this.endInput.value !== "") params.end_step = this.endInput.value;
    const socket = new WebSocket(
      wsUrl(`/monitoring/${enc(this.jobId)}/playback`, params),
      wsProtocols(),
    );
    this.socket = socket;
    this.paused = false;
    this.seekPending = seekTo !== null;
    this.prePlay.textContent = "Starting playback…";
    this.setState("starting");
    if (seekTo !== null) socket.onopen = () => socket.send(JSON.stringify({ action: "seek", step: seekTo }));
    const playing = (this.played = (this.played ?? 0) + 1);
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      // Handled in order, after any seek fill queued before; never once Play started another.
      this.enqueue(() => playing === this.played && this.onMessage(message));
    };
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.pauseButton.disabled = true;
      this.setConnection("idle");
      if (this.stateName !== "complete") this.setState(event.reason ? `stopped: ${event.reason}` : "stopped");
    };
    this.setConnection("live");
  }

  /** Run `task` after everything queued before it (a seek's fill waits for nothing else). */
  enqueue(task) {
    this.queue = this.queue.then(task).catch((error) => this.say(`Playback: ${error.message}`, { error: true }));
  }

  onMessage(message) {
    switch (message.type) {
      case "playback_info":
        this.info = message;
        this.speed = message.speed;
        this.pauseButton.disabled = false;
        this.setState(message.total_metrics ? "playing" : "nothing to play");
        if (!this.seekPending) this.showProgress(0, 0, message.total_metrics, null);
        if (!message.total_metrics) this.prePlay.textContent = "Nothing stored in this range: nothing to replay.";
        break;
      case "metric":
        if (!this.seekPending) this.onRecord(message);
        break;
      case "playback_state":
        this.paused = message.paused;
        this.speed = message.speed;
        this.pauseButton.textContent = message.paused ? "Resume" : "Pause";
        this.speedInput.value = String(message.speed);
        this.setState(message.paused ? "paused" : "playing");
        if (message.action === "seek") {
          this.seekPending = false;
          this.showPosition(message.current_index, message.total);
        }
        break;
      case "playback_complete":
        this.setState("complete");
        this.showProgress(1, this.info?.total_metrics ?? 0, this.info?.total_metrics ?? 0, this.columns.lastStep);
        break;
      case "error":
        if (!this.info) { // refused before it started (the socket closes next)
          this.say(`Not started: ${message.detail}.`, { error: true });
          break;
        }
        // A refused control: the playback goes on as before, and the page says so
        // (the state beside it stays the server's).
        if (/\bseek\b/.test(message.detail)) this.seekPending = false; // no answer will come for it
        this.speedInput.value = String(this.speed);
        this.say(`Not applied: ${message.detail}. The playback goes on at ${fmtSpeed(this.speed)}.`, { error: true });
        break;
      default:
        break;
    }
  }

  onRecord(message) {
    const record = message.data;
    const last = this.columns.lastStep;
    if (last !== null && record.step <= last) {
      // After a seek backwards (or the seek's own step, already drawn): drop what comes again.
      this.columns = this.columns.slice(null, record.step - 1);
    }
    if (!message.truncated) this.columns.appendRecord(record);
    for (const anomaly of record.anomalies || []) {
      this.anomalies.add({ ...anomaly, step: record.step, source: "callback" });
    }
    this.draw();
    this.showProgress(message.progress, message.current_index + 1, message.total, record.step);
  }

  /** The charts (shown from the first point on) and the anomalies up to the last step held. */
  draw() {
    if (this.columns.length) {
      this.prePlay.hidden = true;
      this.notRecorded.hidden = true; // the board's own line names the folded charts from now on
      this.board.root.hidden = false;
    }
    this.board.setColumns(this.columns);
    this.showAnomalies();
  }

  showProgress(progress, done, total, step) {
    this.fill.style.width = `${(Math.min(1, progress) * 100).toFixed(1)}%`;
    this.bar.dataset.progress = String(progress);
    this.position.textContent = `${done} / ${total}${step === null ? "" : ` · step ${fmtStep(step)}`}`;
  }

  /** After a seek: `index` records come before its step; the charts hold up to its step. */
  showPosition(index, total) {
    const step = this.columns.lastStep;
    const done = index + (step !== null && step >= this.seekedTo ? 1 : 0);
    this.showProgress(total ? done / total : 0, done, total, step);
  }

  setState(name) {
    this.stateName = name;
    this.state.textContent = name;
    this.state.dataset.state = name;
  }

  send(control) {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(control));
  }

  togglePause() {
    this.send({ action: this.paused ? "resume" : "pause" });
  }

  /** The typed speed, refused here (with the range) when the server would refuse it. */
  setSpeed() {
    const parsed = parseSpeed(this.speedInput.value);
    if (parsed.error) {
      const playing = this.socket ? ` The playback goes on at ${fmtSpeed(this.speed)}.` : "";
      if (this.socket) this.speedInput.value = String(this.speed);
      this.say(`${parsed.error}${playing}`, { error: true });
      return;
    }
    if (this.socket && this.socket.readyState === WebSocket.OPEN) {
      this.say("");
      this.send({ action: "speed", value: parsed.speed });
    } else {
      this.say(`Play starts at ${fmtSpeed(parsed.speed)}.`);
    }
  }

  seekTyped() {
    const parsed = parseSeek(this.seekInput.value, this.info?.start_step, this.info?.end_step);
    if (parsed.error) this.say(parsed.error, { error: true });
    else this.seek(parsed.step);
  }

  /**
   * Move to `step`: the charts are redrawn there at once (paused or not), from the
   * stored history, and the server plays on from there. Before Play it says so.
   */
  seek(step) {
    if (!Number.isFinite(step)) return;
    if (!this.info) {
      this.say("Press Play first: a seek moves a playback that has started.", { error: true });
      return;
    }
    const target = Math.round(step);
    this.say("");
    this.seekedTo = target;
    const open = this.socket && this.socket.readyState === WebSocket.OPEN;
    if (open) {
      this.seekPending = true;
      this.send({ action: "seek", step: target });
    }
    this.enqueue(() => this.fillTo(target));
    if (!open) this.enqueue(() => this.play({ seekTo: target })); // it ended: play again from there
  }

  /** The charts up to and including `step`: cut back, or filled in from the stored history. */
  async fillTo(step) {
    const last = this.columns.lastStep;
    if (last !== null && last >= step) {
      this.columns = this.columns.slice(null, step);
    } else {
      const from = last === null ? this.info.start_step : last + 1;
      const body = await api(`/monitoring/${enc(this.jobId)}/metrics?max_points=${FILL_POINTS}&start_step=${from}&end_step=${step}`);
      this.columns = this.columns.concat(Columns.fromHistory(body));
    }
    this.draw();
  }

  /** The job's stored anomalies (platform and callback); shown as the playback reaches them. */
  async loadAnomalies() {
    try {
      for (const anomaly of await allAnomalies(this.jobId)) this.anomalies.add(anomaly);
    } catch {
      return; // the records' own anomalies still show
    }
    this.showAnomalies();
  }

  /** Markers and list: the anomalies up to the last step played, redrawn only on change. */
  showAnomalies() {
    const reached = this.anomalies.upTo(this.columns.lastStep);
    const shown = `${this.anomalies.version}:${reached.length}`;
    if (shown === this.shownAnomalies) return;
    this.shownAnomalies = shown;
    this.anomalyCount.textContent = String(reached.length);
    renderAnomalies(this.anomalyPanel, reached, (a) => this.board.zoom([Math.max(0, a.step - 20), a.step + 20]));
    this.board.setAnomalies(reached);
  }

  seekToClick(event) {
    if (!this.info || !this.info.total_metrics) return;
    const box = this.bar.getBoundingClientRect();
    const fraction = Math.min(1, Math.max(0, (event.clientX - box.left) / box.width));
    const { start_step: lo, end_step: hi } = this.info;
    this.seek(Math.round(lo + fraction * (hi - lo)));
  }
}

/** A run's anomalies in step order, each incident once (by step and type). */
class StepAnomalies {
  constructor() {
    this.list = [];
    this.keys = new Set();
    this.version = 0; // bumped on every addition, so a view knows to redraw
  }

  add(anomaly) {
    const key = `${anomaly.step}|${anomaly.type}`; // the API lists one incident per (step, type)
    if (this.keys.has(key)) return;
    this.keys.add(key);
    this.version += 1;
    let at = this.list.length;
    while (at > 0 && this.list[at - 1].step > anomaly.step) at -= 1;
    this.list.splice(at, 0, anomaly);
  }

  /** Those at or before `step` (none before the first step is played). */
  upTo(step) {
    if (step === null) return [];
    let end = this.list.length;
    while (end > 0 && this.list[end - 1].step > step) end -= 1;
    return this.list.slice(0, end);
  }
}
