// Workloads: one page at a time from the server (filters, sort and cursor paging are the API's),
// so the table is as fast with 10,000 workloads as with 10. The filters live in the URL hash, so a
// filtered view can be bookmarked. Live events re-read the current page (debounced).

import * as api from "../api.js";
import { clear, emptyRow, errorBox, fmtTime, h, list, modeBadge, stateBadge, workloadLink } from "../ui.js";

const PAGE_SIZE = 50;
const FILTERS = ["q", "state", "policy", "mode", "scheduler", "has_anomaly", "sort"];
const SORTS = [["", "last seen (newest)"], ["last_seen", "last seen (oldest)"], ["-first_seen", "first seen (newest)"],
  ["first_seen", "first seen (oldest)"], ["id", "workload id"], ["-id", "workload id (desc)"]];

function select(name, options, value) {
  return h("select", { name }, options.map(([v, label]) => h("option", { value: v, selected: v === value }, label)));
}

export async function mount(root, route, { onLive }) {
  const q = route.query;
  const form = h("form", { class: "filters" },
    h("input", { name: "q", type: "search", placeholder: "search workload, job id, policy…", value: q.q || "" }),
    h("input", { name: "state", placeholder: "state", value: q.state || "", size: 12 }),
    h("input", { name: "policy", placeholder: "policy", value: q.policy || "", size: 12 }),
    select("mode", [["", "any mode"], ["monitor", "monitor"], ["action", "action"]], q.mode || ""),
    h("input", { name: "scheduler", placeholder: "scheduler / cluster", value: q.scheduler || "", size: 14 }),
    select("has_anomaly", [["", "any"], ["true", "with anomalies"], ["false", "without"]], q.has_anomaly || ""),
    select("sort", SORTS, q.sort || ""),
    h("button", { type: "submit" }, "Filter"));
  const tbody = h("tbody", {});
  const status = h("span", { class: "muted" });
  const prev = h("button", { type: "button", class: "secondary", disabled: true }, "◀ Previous");
  const next = h("button", { type: "button", class: "secondary", disabled: true }, "Next ▶");
  const error = h("div");
  clear(root, h("h1", {}, "Workloads"), form, error,
    h("table", { class: "grid", id: "workloads-table" },
      h("thead", {}, h("tr", {}, ["workload", "state", "attempt", "policy", "mode", "anomalies", "last seen"].map((c) => h("th", {}, c)))),
      tbody),
    h("div", { class: "pager" }, prev, next, status));

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const params = new URLSearchParams();
    for (const name of FILTERS) {
      const v = form.elements[name].value.trim();
      if (v) params.set(name, v);
    }
    const text = params.toString();
    location.hash = `#/workloads${text ? "?" + text : ""}`;
  });

  const query = Object.fromEntries(FILTERS.filter((k) => q[k]).map((k) => [k, q[k]]));
  const cursors = [""]; // cursor of each page seen so far: cursors[i] reads page i
  let pageIndex = 0;
  let nextCursor = null;

  async function load() {
    try {
      const page = await api.get("/workloads", { ...query, limit: PAGE_SIZE, cursor: cursors[pageIndex] });
      const items = list(page.items);
      nextCursor = page.next;
      clear(error);
      clear(tbody, items.length ? items.map((w) => h("tr", { "data-workload": w.workload },
        h("td", {}, workloadLink(w.workload)), h("td", {}, stateBadge(w.state)), h("td", {}, w.attempt),
        h("td", {}, w.policy || "—"), h("td", {}, modeBadge(w.mode)),
        h("td", { class: w.anomalies ? "warn" : "" }, w.anomalies ?? 0), h("td", { class: "mono" }, fmtTime(w.last_seen))))
        : emptyRow(7, "No workload matches."));
      prev.disabled = pageIndex === 0;
      next.disabled = !nextCursor;
      status.textContent = `page ${pageIndex + 1} · ${items.length} shown`;
    } catch (err) {
      clear(error, errorBox(err));
    }
  }
  prev.addEventListener("click", () => {
    if (pageIndex > 0) { pageIndex -= 1; load(); }
  });
  next.addEventListener("click", () => {
    if (!nextCursor) return;
    cursors[pageIndex + 1] = nextCursor;
    pageIndex += 1;
    load();
  });
  await load();
  let timer = null;
  const off = onLive(() => {
    if (timer === null) timer = setTimeout(() => { timer = null; load(); }, 400);
  });
  return () => {
    off();
    if (timer !== null) clearTimeout(timer);
  };
}
