// Audit search: time range, workload, attempt, kind, producer; the server pages with opaque
// cursors (a large history is read page by page, never at once). New records matching the
// search arrive live at the top.

import * as api from "../api.js";
import { clear, emptyRow, errorBox, fmtTime, h, list, workloadLink } from "../ui.js";

const PAGE_SIZE = 100;
const FIELDS = ["since", "until", "workload", "attempt", "kind", "producer"];
const KINDS = ["", "anomaly", "verdict", "advice", "action", "outcome", "watchdog"];

function summary(r) {
  const p = r.payload || {};
  switch (r.kind) {
    case "anomaly": return `${p.symptom || ""} ${p.category || ""} suspects=${(p.suspect_nodes || []).join(",")}`;
    case "verdict": return `${p.attribution || ""} ${p.category || ""} nodes=${(p.nodes || []).join(",")}`;
    case "advice": return `${p.action || ""} mode=${p.mode || ""} exclude=${(p.exclude_nodes || []).join(",")}`;
    case "action": return `${p.operation || ""} ${p.status || ""}${p.error ? " " + p.error : ""}` +
      `${p.arguments && p.by ? " " + JSON.stringify(p.arguments) : ""}${p.by ? " by " + p.by : ""}`;
    case "outcome": return `${p.disposition || ""}: ${p.detail || ""}`;
    case "watchdog": return `${p.reason || ""}`;
    default: return JSON.stringify(p);
  }
}

function row(r, fresh) {
  return h("tr", { class: fresh ? "fresh" : "", "data-id": r.id, "data-kind": r.kind, "data-workload": r.workload },
    h("td", { class: "mono" }, fmtTime(r.time)), h("td", {}, workloadLink(r.workload)), h("td", {}, r.attempt ?? "—"),
    h("td", {}, r.kind), h("td", {}, r.decided_by), h("td", { class: "summary" }, summary(r)));
}

function matches(r, q) {
  if (q.workload && r.workload !== q.workload) return false;
  if (q.attempt && String(r.attempt) !== q.attempt) return false;
  if (q.kind && r.kind !== q.kind) return false;
  if (q.producer && !String(r.decided_by).includes(q.producer)) return false;
  return !(q.until && Date.parse(r.time) > Date.parse(q.until));
}

export async function mount(root, route, { onLive }) {
  const q = route.query;
  const form = h("form", { class: "filters", id: "audit-form" },
    h("label", {}, "since ", h("input", { name: "since", placeholder: "2026-12-01T10:00:00Z", value: q.since || "", size: 22 })),
    h("label", {}, "until ", h("input", { name: "until", placeholder: "ISO 8601", value: q.until || "", size: 22 })),
    h("input", { name: "workload", placeholder: "workload (slurm/cluster/123)", value: q.workload || "", size: 26 }),
    h("input", { name: "attempt", placeholder: "attempt", value: q.attempt || "", size: 6, inputmode: "numeric" }),
    h("select", { name: "kind" }, KINDS.map((k) => h("option", { value: k, selected: k === (q.kind || "") }, k || "any kind"))),
    h("select", { name: "producer" }, [["", "any producer"], ["policy", "policy engine"], ["watchdog", "watchdog"], ["detector", "detector"],
      ["api", "api (people)"], ["operator", "operator"]].map(([v, l]) =>
      h("option", { value: v, selected: v === (q.producer || "") }, l))),
    h("button", { type: "submit" }, "Search"));
  const tbody = h("tbody", {});
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "Older records");
  const error = h("div");
  const count = h("span", { class: "muted" });
  clear(root, h("h1", {}, "Audit"), form, error,
    h("table", { class: "grid", id: "audit-table" },
      h("thead", {}, h("tr", {}, ["time", "workload", "attempt", "kind", "decided by", "what"].map((c) => h("th", {}, c)))), tbody),
    h("div", { class: "pager" }, more, count));

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const params = new URLSearchParams();
    for (const name of FIELDS) {
      const v = form.elements[name].value.trim();
      if (v) params.set(name, v);
    }
    const text = params.toString();
    location.hash = `#/audit${text ? "?" + text : ""}`;
  });

  const query = Object.fromEntries(FIELDS.filter((k) => q[k]).map((k) => [k, q[k]]));
  let cursor = null;
  let shown = 0;
  const seen = new Set();
  async function load(first) {
    try {
      const page = await api.get("/audit", { ...query, limit: PAGE_SIZE, order: "desc", cursor: first ? "" : cursor });
      const items = list(page.items);
      cursor = page.next;
      clear(error);
      if (first) clear(tbody);
      for (const r of items) {
        if (seen.has(r.id)) continue;
        seen.add(r.id);
        tbody.append(row(r, false));
        shown += 1;
      }
      if (!shown) clear(tbody, emptyRow(6, "No audit record matches."));
      more.hidden = !cursor;
      count.textContent = `${shown} record(s) shown${cursor ? ", more on the server" : ""}`;
    } catch (err) {
      clear(error, errorBox(err));
    }
  }
  more.addEventListener("click", () => load(false));
  await load(true);
  const off = onLive((ev) => {
    const r = ev.data;
    if (!r || typeof r !== "object" || r.id === undefined || !r.kind || !r.time || seen.has(r.id)) return;
    if (!matches(r, q)) return;
    seen.add(r.id);
    if (!shown) clear(tbody);
    shown += 1;
    tbody.prepend(row(r, true));
    count.textContent = `${shown} record(s) shown${cursor ? ", more on the server" : ""}`;
  });
  return off;
}
