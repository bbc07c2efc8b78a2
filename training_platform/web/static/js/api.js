// Talking to the platform: REST under /api, WebSockets, and the optional API token.
//
// The token (PLATFORM_API_TOKEN) is asked for only when the server answers 401, kept
// in this browser's localStorage, sent as a Bearer header on REST calls and as a
// WebSocket subprotocol on sockets (a browser cannot set headers on a WebSocket
// handshake, and a token in the URL would land in the server's access log).

const TOKEN_KEY = "training_platform.token";

export class ApiError extends Error {
  constructor(status, body) {
    super(describe(status, body));
    this.status = status;
    this.body = body;
  }
}

function describe(status, body) {
  const detail = body && body.detail;
  if (typeof detail === "string") return `${status}: ${detail}`;
  if (Array.isArray(detail)) return `${status}: ${detail.map((d) => d.msg).join("; ")}`;
  return `HTTP ${status}`;
}

export function token() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

function askForToken() {
  const value = window.prompt("This server needs its API token (PLATFORM_API_TOKEN):", "");
  if (value) localStorage.setItem(TOKEN_KEY, value.trim());
  return Boolean(value);
}

/** GET (or another method) a JSON resource under /api; throws ApiError. */
export async function api(path, { method = "GET", body, signal } = {}) {
  for (let attempt = 0; attempt < 2; attempt += 1) {
    const headers = { Accept: "application/json" };
    if (token()) headers.Authorization = `Bearer ${token()}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(`/api${path}`, {
      method,
      headers,
      signal,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401 && attempt === 0 && askForToken()) continue;
    const data = await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }
  throw new ApiError(401, { detail: "missing or invalid API token" });
}

/** ws:// or wss:// URL of an /api WebSocket path (never with the token: see wsProtocols). */
export function wsUrl(path, params = {}) {
  const url = new URL(`/api${path}`, window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
  }
  return url.toString();
}

/**
 * The subprotocols to open an /api WebSocket with: "training-platform" (which the
 * server echoes) and, with a token, "training-platform.token.<base64url of it>".
 */
export function wsProtocols() {
  const protocols = ["training-platform"];
  if (token()) protocols.push(`training-platform.token.${base64url(token())}`);
  return protocols;
}

function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export const enc = encodeURIComponent;

// Pages of anomalies a view reads at most (10,000 stored rows each): a run
// with more is broken beyond what a list can show; its charts still mark them.
const MAX_ANOMALY_PAGES = 10;

/** Every stored anomaly of a job (incidents), following the API's pages by step. */
export async function allAnomalies(jobId) {
  const anomalies = [];
  let start = null;
  for (let page = 0; page < MAX_ANOMALY_PAGES; page += 1) {
    const from = start === null ? "" : `&start_step=${start}`;
    const body = await api(`/monitoring/${enc(jobId)}/metrics/anomalies?limit=10000${from}`);
    anomalies.push(...body.anomalies);
    if (body.next_start_step === null || body.next_start_step === undefined) break;
    start = body.next_start_step;
  }
  return anomalies;
}
