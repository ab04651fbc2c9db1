// The console's only door to the server: JSON calls to /api/v1 and its Server-Sent Events stream.
// Who the user is travels in the HttpOnly session cookie set by the login form (/login): this code
// never sees a token, and the browser sends the cookie with fetch() and EventSource alike. Mutating
// calls carry the API's CSRF header, which another site cannot make a browser send.

export const BASE = "/api/v1";

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
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
  const init = { method, headers: { Accept: "application/json", ...extra }, credentials: "same-origin" };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(url, init);
  // 401: the session ended (expired, logged out elsewhere, server restarted): show the login form
  if (response.status === 401) location.assign("/");
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

/** Forget the session (POST /logout with the CSRF header), then show the login form. */
export async function logout() {
  await fetch("/logout", { method: "POST", headers: { "X-Trainguard-Request": "1" }, credentials: "same-origin" });
  location.assign("/");
}

/**
 * Follow /api/v1/events (text/event-stream) with the browser's EventSource (it sends the session
 * cookie, reconnects by itself and resumes with Last-Event-ID) and call onEvent({event, data, id})
 * for each event. onState("live" | "retrying" | "denied") tells the page. When the server refuses
 * the stream (EventSource gives up on any answer but 200), whoami says why: 401 shows the login
 * form, anything else is retried with backoff. Returns a function that stops it.
 */
export function follow(onEvent, onState) {
  let stopped = false;
  let source = null;
  let timer = null;
  let delay = 1000;

  const deliver = (e) => {
    let data = e.data;
    try {
      data = JSON.parse(data);
    } catch {
      /* plain text event */
    }
    onEvent({ event: e.type, data, id: e.lastEventId });
  };

  function open() {
    source = new EventSource(BASE + "/events");
    source.addEventListener("open", () => {
      delay = 1000;
      onState("live");
    });
    for (const name of ["audit", "overflow", "message"]) source.addEventListener(name, deliver);
    source.addEventListener("error", async () => {
      if (stopped) return;
      if (source.readyState !== EventSource.CLOSED) {
        onState("retrying");
        return;
      }
      const response = await fetch(BASE + "/whoami", { credentials: "same-origin" }).catch(() => null);
      if (stopped) return;
      if (response && (response.status === 401 || response.status === 403)) {
        onState("denied");
        if (response.status === 401) location.assign("/");
        return;
      }
      onState("retrying");
      timer = setTimeout(open, delay);
      delay = Math.min(delay * 2, 15000);
    });
  }

  open();
  return () => {
    stopped = true;
    clearTimeout(timer);
    if (source) source.close();
  };
}
