// The JSON API (coordinator/world/API.md) and the live event stream.

const BASE = "/world/api";
const REQUEST_TIMEOUT_MS = 15_000;

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `request failed with HTTP ${status}`);
    this.status = status;
    this.type = body?.error?.type || "http";
  }
}

export async function get(path, { key = null, params = null } = {}) {
  return request("GET", path, { key, params });
}

export async function put(path, body, { key = null } = {}) {
  return request("PUT", path, { key, body });
}

async function request(method, path, { key, params, body }) {
  const url = new URL(BASE + path, window.location.origin);
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== "" && value !== null && value !== undefined) url.searchParams.set(name, value);
  }
  const headers = { Accept: "application/json" };
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
  try {
    const response = await fetch(url, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      signal: controller.signal, cache: "no-store", credentials: "omit",
    });
    const data = await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  } finally {
    clearTimeout(timer);
  }
}

// One EventSource for the page; listeners per event name. EventSource reconnects by itself.
export class LiveFeed {
  constructor(onState) {
    this.listeners = new Map();
    this.onState = onState;
    this.source = null;
  }

  on(name, listener) {
    if (!this.listeners.has(name)) this.listeners.set(name, new Set());
    this.listeners.get(name).add(listener);
    return () => this.listeners.get(name).delete(listener);
  }

  start() {
    this.source = new EventSource(`${BASE}/events`);
    this.source.onopen = () => this.onState("live");
    this.source.onerror = () => this.onState(this.source.readyState === EventSource.CLOSED ? "offline" : "reconnecting");
    for (const name of ["fleet", "totals", "epoch"]) {
      this.source.addEventListener(name, (event) => {
        const data = JSON.parse(event.data);
        for (const listener of this.listeners.get(name) || []) listener(data);
      });
    }
  }
}
