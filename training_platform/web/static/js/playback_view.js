// The playback view: replay a stored run (or a range of it) at 0.1x to 10x, with
// pause/resume, speed changes and seeking while it plays; the charts redraw as the
// records stream in (`/api/monitoring/{job}/playback`). Like the live view, the
// charts carry anomaly markers and a side panel lists the anomalies, both only up
// to the step the playback has reached (a seek backwards takes them away again).

import { allAnomalies, api, enc, wsProtocols, wsUrl } from "./api.js";
import { ChartBoard } from "./board.js";
import { fmtStep, h } from "./format.js";
import { renderAnomalies } from "./panels.js";
import { Columns } from "./series.js";

export class PlaybackView {
  constructor(root, jobId, setConnection) {
    this.root = root;
    this.jobId = jobId;
    this.setConnection = setConnection;
    this.socket = null;
    this.info = null;
    this.columns = new Columns();
    this.board = new ChartBoard({ syncKey: `playback:${jobId}` });
    this.anomalies = new StepAnomalies();
    this.shownAnomalies = null;
  }

  async start() {
    const job = await api(`/jobs/${enc(this.jobId)}`);
    const input = (name, attrs) => h("input", { name, id: `playback-${name}`, ...attrs });
    this.startInput = input("start", { type: "number", min: "0", placeholder: "first" });
    this.endInput = input("end", { type: "number", min: "0", placeholder: "last" });
    this.speedInput = input("speed", { type: "number", min: "0.1", max: "10", step: "0.1", value: "1" });
    this.seekInput = input("seek", { type: "number", min: "0", placeholder: "step" });
    this.playButton = h("button", { id: "playback-play", onclick: () => this.play() }, "Play");
    this.pauseButton = h("button", { id: "playback-pause", disabled: true, onclick: () => this.togglePause() }, "Pause");
    this.state = h("span", { id: "playback-state", class: "playback-state" }, "ready");
    this.fill = h("div", { class: "progress-fill", style: "width:0%" });
    this.bar = h("div", { class: "progress playback-bar", id: "playback-progress", title: "Click to seek", onclick: (e) => this.seekToClick(e) }, this.fill);
    this.position = h("span", { class: "muted", id: "playback-position" }, "");
    this.anomalyPanel = h("div", { class: "panel-body", id: "anomalies-panel" });
    this.anomalyCount = h("span", { class: "count", id: "anomaly-count" }, "0");
    const speedControl = h("label", { class: "control" }, "Speed ×", this.speedInput,
      h("button", { onclick: () => this.send({ action: "speed", value: Number(this.speedInput.value) }) }, "Set"));
    this.root.replaceChildren(
      h("div", { class: "page-head" },
        h("h1", {}, `Playback · ${job.job_id}`),
        h("a", { class: "button", href: `#/run/${enc(this.jobId)}` }, "← Live view")),
      h("div", { class: "toolbar playback-controls" },
        h("label", { class: "control" }, "From step ", this.startInput),
        h("label", { class: "control" }, "to ", this.endInput),
        speedControl, this.playButton, this.pauseButton,
        h("label", { class: "control" }, "Seek to ", this.seekInput,
          h("button", { onclick: () => this.seek(Number(this.seekInput.value)) }, "Go")),
        this.board.controls),
      h("div", { class: "playback-progress" }, this.bar, this.state, this.position),
      h("div", { class: "run-layout" },
        h("div", { class: "run-main" }, this.board.root),
        h("aside", { class: "run-side" },
          h("section", { class: "panel" }, h("h2", {}, "Anomalies so far ", this.anomalyCount), this.anomalyPanel))));
    this.showAnomalies();
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

  /**
   * Play the chosen range from its start; or, with `seekTo` (a seek after the
   * playback ended and its socket closed), play it again from that step, keeping
   * the records before it: the server is asked to seek as soon as the socket opens,
   * and records before the step that arrive meanwhile are dropped (they are held).
   */
  play({ seekTo = null } = {}) {
    this.closeSocket();
    this.resumeFrom = seekTo;
    if (seekTo === null) {
      this.columns = new Columns();
      this.board.setColumns(this.columns);
      this.showAnomalies();
      this.loadAnomalies();
    }
    const params = { speed: this.speedInput.value || "1" };
    if (this.startInput.value !== "") params.start_step = this.startInput.value;
    if (this.endInput.value !== "") params.end_step = this.endInput.value;
    const socket = new WebSocket(
      wsUrl(`/monitoring/${enc(this.jobId)}/playback`, params),
      wsProtocols(),
    );
    this.socket = socket;
    this.paused = false;
    this.setState("starting");
    if (seekTo !== null) socket.onopen = () => socket.send(JSON.stringify({ action: "seek", step: seekTo }));
    socket.onmessage = (event) => this.onMessage(JSON.parse(event.data));
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.pauseButton.disabled = true;
      this.setConnection("idle");
      if (this.stateName !== "complete") this.setState(event.reason ? `stopped: ${event.reason}` : "stopped");
    };
    this.setConnection("live");
  }

  onMessage(message) {
    switch (message.type) {
      case "playback_info":
        this.info = message;
        this.pauseButton.disabled = false;
        this.setState(message.total_metrics ? "playing" : "nothing to play");
        this.showProgress(0, 0, message.total_metrics, null);
        break;
      case "metric":
        this.onRecord(message);
        break;
      case "playback_state":
        this.paused = message.paused;
        this.pauseButton.textContent = message.paused ? "Resume" : "Pause";
        this.speedInput.value = String(message.speed);
        this.setState(message.paused ? "paused" : "playing");
        break;
      case "playback_complete":
        this.setState("complete");
        this.showProgress(1, this.info?.total_metrics ?? 0, this.info?.total_metrics ?? 0, this.columns.lastStep);
        break;
      case "error":
        this.setState(`error: ${message.detail}`);
        break;
      default:
        break;
    }
  }

  onRecord(message) {
    const record = message.data;
    if (this.resumeFrom !== null && this.resumeFrom !== undefined) {
      if (record.step < this.resumeFrom) return; // played again before the seek took: held
      this.resumeFrom = null;
    }
    const last = this.columns.lastStep;
    if (last !== null && record.step <= last) {
      // After a seek backwards: drop what comes again.
      this.columns = this.columns.slice(null, record.step - 1);
    }
    if (!message.truncated) this.columns.appendRecord(record);
    for (const anomaly of record.anomalies || []) {
      this.anomalies.add({ ...anomaly, step: record.step, source: "callback" });
    }
    this.board.setColumns(this.columns);
    this.showAnomalies();
    this.showProgress(message.progress, message.current_index + 1, message.total, record.step);
  }

  showProgress(progress, done, total, step) {
    this.fill.style.width = `${(Math.min(1, progress) * 100).toFixed(1)}%`;
    this.bar.dataset.progress = String(progress);
    this.position.textContent = `${done} / ${total}${step === null ? "" : ` · step ${fmtStep(step)}`}`;
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

  seek(step) {
    if (!Number.isFinite(step)) return;
    const target = Math.round(step);
    this.columns = this.columns.slice(null, target - 1);
    this.board.setColumns(this.columns);
    this.showAnomalies();
    if (this.socket && this.socket.readyState === WebSocket.OPEN) this.send({ action: "seek", step: target });
    else if (this.info) this.play({ seekTo: target }); // it ended: play again from there
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
