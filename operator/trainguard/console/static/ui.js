// Small DOM helpers: elements are built with h() (text is always set as text, never parsed as HTML,
// so a log line or a job name can never inject markup), plus formatting shared by the pages.

const SVG_NS = "http://www.w3.org/2000/svg";

function fill(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.setAttribute("class", Array.isArray(v) ? v.filter(Boolean).join(" ") : v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function clear(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

export function parseTime(text) {
  const t = Date.parse(text);
  return Number.isNaN(t) ? null : t;
}

export function fmtTime(text) {
  const t = typeof text === "number" ? text : parseTime(text);
  if (t === null) return text ? String(text) : "—";
  const d = new Date(t);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}.${pad(d.getUTCMilliseconds(), 3)}Z`;
}

export function fmtDur(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "—";
  const sec = ms / 1000;
  if (sec < 1) return `${Math.round(ms)} ms`;
  if (sec < 60) return `${sec.toFixed(sec < 10 ? 2 : 1)} s`;
  const m = Math.floor(sec / 60);
  if (m < 60) return `${m} min ${Math.round(sec - m * 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function modeBadge(mode) {
  const m = String(mode || "").toLowerCase();
  const known = m === "action" || m === "monitor";
  return h("span", { class: ["badge", "mode", known ? `mode-${m}` : "mode-unknown"] }, known ? m.toUpperCase() : (mode || "?"));
}

export function stateBadge(state) {
  const st = String(state || "unknown");
  return h("span", { class: ["badge", "state", `state-${st.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`] }, st);
}

export function errorBox(err) {
  const status = err && err.status ? `${err.status} ` : "";
  return h("div", { class: "error", role: "alert" }, `${status}${err && err.message ? err.message : String(err)}`);
}

// A write action started by a button (undo a drain, switch a mode): the button is off while it runs;
// the API's answer, or its refusal (403 for a read-only user), is shown in `notice` as it is, and on
// success the page reloads (the button then comes back as the new state allows).
export async function act(notice, button, call, done, reload) {
  button.disabled = true;
  try {
    const result = await call();
    clear(notice, h("div", { class: "ok" }, result.message || done));
    await reload();
  } catch (err) {
    clear(notice, errorBox(err));
    button.disabled = false;
  }
}

export function emptyRow(cols, text) {
  return h("tr", {}, h("td", { colspan: cols, class: "muted" }, text));
}

export function workloadLink(id) {
  return h("a", { href: `#/workload/${encodeURIComponent(id)}`, class: "mono" }, id);
}

export function list(items) {
  return Array.isArray(items) ? items : [];
}

export function joined(value) {
  if (Array.isArray(value)) return value.length ? value.join(", ") : "—";
  return value === undefined || value === null || value === "" ? "—" : String(value);
}
