// The console's only door to the server: JSON calls to /api/v1 and its Server-Sent Events stream.
// A bearer token typed by the user lives in sessionStorage (this tab only, gone with it) and goes
// out as `Authorization: Bearer`; a header cannot be forged cross-site, so it also covers CSRF.

const TOKEN_KEY = "trainguard.token";
export const BASE = "/api/v1";

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra) {
  const h = { Accept: "application/json", ...extra };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

function messageOf(status, body, text) {
  if (body && typeof body === "object") {
    const m = body.error || body.message || body.detail || body.title;
    if (typeof m === "string" && m) return m;
    if (m && typeof m === "object" && typeof m.message === "string") return m.message;
  }
  return text ? text.slice(0, 300) : `HTTP ${status}`;
}

async function call(method, path, { query, body } = {}) {
  const url = new URL(BASE + path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, String(v));
  }
  // mutating calls carry the API's CSRF header and a JSON body
  const extra = method === "GET" ? {} : { "Content-Type": "application/json", "X-Trainguard-Request": "1" };
  const init = { method, headers: headers(extra) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(url, init);
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, messageOf(response.status, data, text), data);
  return data;
}

export const get = (path, query) => call("GET", path, { query });
export const post = (path, body) => call("POST", path, { body: body ?? {} });
export const put = (path, body) => call("PUT", path, { body: body ?? {} });

/** A workload id ("slurm/cluster/123") in a path: each part escaped, the slashes kept (the API's
 * route takes the rest of the path as the id). */
export const wid = (id) => String(id).split("/").map(encodeURIComponent).join("/");

/**
 * Follow /api/v1/events (text/event-stream) and call onEvent({event, data, id}) for each event.
 * Read with fetch() rather than EventSource: EventSource cannot send the Authorization header.
 * Reconnects with backoff and Last-Event-ID; onState("live" | "retrying" | "denied") tells the page.
 * Returns a function that stops it.
 */
export function follow(onEvent, onState) {
  let stopped = false;
  let controller = null;
  let lastId = "";
  let delay = 500;

  async function once() {
    controller = new AbortController();
    const h = headers({ Accept: "text/event-stream" });
    if (lastId) h["Last-Event-ID"] = lastId;
    const response = await fetch(BASE + "/events", { headers: h, signal: controller.signal, cache: "no-store" });
    if (response.status === 401 || response.status === 403) {
      onState("denied", response.status);
      return false;
    }
    if (!response.ok || !response.body) throw new Error(`events: HTTP ${response.status}`);
    onState("live");
    delay = 500;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let event = { event: "message", data: [], id: "" };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return true;
      buffer += value;
      let nl;
      while ((nl = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + (buffer.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {
          if (event.data.length) {
            if (event.id) lastId = event.id;
            let data = event.data.join("\n");
            try {
              data = JSON.parse(data);
            } catch {
              /* plain text event */
            }
            onEvent({ event: event.event, data, id: event.id });
          }
          event = { event: "message", data: [], id: "" };
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "data") event.data.push(val);
        else if (field === "event") event.event = val;
        else if (field === "id") event.id = val;
        else if (field === "retry" && /^\d+$/.test(val)) delay = Number(val);
      }
    }
  }

  (async () => {
    while (!stopped) {
      let retry = true;
      try {
        retry = await once();
      } catch (err) {
        if (stopped) return;
      }
      if (stopped || !retry) return;
      onState("retrying");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 15000);
    }
  })();
  return () => {
    stopped = true;
    if (controller) controller.abort();
  };
}
