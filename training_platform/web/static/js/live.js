// A job's live WebSocket (`/api/monitoring/{job}/live`), reconnecting where it left off.
//
// The server sends the stored records after `since_step` first, then live ones, with
// no gap and no duplicate at the hand-over; on a reconnect we ask again from the
// last step we hold, so a dropped connection (or the server closing a client that
// fell behind, code 1013) loses nothing either.

import { enc, wsProtocols, wsUrl } from "./api.js";

const RETRY_MS = [500, 1000, 2000, 5000];

export class LiveStream {
  /**
   * @param jobId
   * @param handlers {onMessage(msg), onState(state, detail), sinceStep(): number|null}
   *   states: connecting, live, waiting (the job does not exist yet), reconnecting,
   *   refused (1008: unknown job, bad parameter), closed
   */
  constructor(jobId, handlers) {
    this.jobId = jobId;
    this.handlers = handlers;
    this.socket = null;
    this.stopped = false;
    this.finished = false;
    this.failures = 0;
    this.timer = null;
    this.waiting = false;
  }

  start() {
    this.stopped = false;
    this.open();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.socket) this.socket.close(1000, "view closed");
    this.socket = null;
  }

  open() {
    const since = this.handlers.sinceStep();
    const url = wsUrl(`/monitoring/${enc(this.jobId)}/live`, { since_step: since });
    const socket = new WebSocket(url, wsProtocols());
    this.socket = socket;
    this.handlers.onState("connecting");
    socket.onopen = () => {
      this.failures = 0;
      this.handlers.onState("live");
    };
    socket.onmessage = (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return; // the server only sends JSON; ignore anything else
      }
      if (message.type === "finished") this.finished = true;
      // The job's files do not exist yet: the server keeps the socket open until they
      // do (then the stream starts as usual) or its wait ends (job_not_found, 1008).
      if (message.type === "waiting") {
        this.waiting = true;
        this.handlers.onState("waiting", `waiting for ${this.jobId} to start`);
      } else if (this.waiting) {
        this.waiting = false;
        this.handlers.onState("live");
      }
      this.handlers.onMessage(message);
    };
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      if (this.stopped) return;
      if (this.finished || event.code === 1000) {
        this.handlers.onState("closed", event.reason);
        return;
      }
      if (event.code === 1008) {
        // A policy refusal (unknown job, bad parameter): retrying cannot help.
        this.handlers.onState("refused", event.reason);
        return;
      }
      const delay = RETRY_MS[Math.min(this.failures, RETRY_MS.length - 1)];
      this.failures += 1;
      this.handlers.onState("reconnecting", event.reason || `code ${event.code}`);
      this.timer = setTimeout(() => this.open(), delay);
    };
  }
}
