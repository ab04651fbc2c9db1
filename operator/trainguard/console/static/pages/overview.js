// Overview: policies with a prominent MONITOR/ACTION badge, workloads by state, recent anomalies,
// recoveries in flight (advice or actions without an outcome yet) and nodes under suspicion.
// Refreshed by live events (debounced), never by a timer.

import * as api from "../api.js";
import { clear, emptyRow, errorBox, fmtTime, h, joined, list, modeBadge, stateBadge, workloadLink } from "../ui.js";

const SAMPLE = 500;
/** Workloads read for the by-state counts: the newest SAMPLE (the page says so when there are more). */

function card(title, body, extra) {
  return h("div", { class: "card" }, h("h2", {}, title, extra || null), body);
}

async function policiesCard() {
  const data = await api.get("/policies");
  const items = list(data.items);
  const body = items.length
    ? h("ul", { class: "policies" }, items.map((p) =>
      h("li", { "data-policy": p.name }, modeBadge(p.mode), " ", h("strong", {}, p.name),
        h("span", { class: "muted" }, ` declared ${p.declared_mode} · ${p.covered_workloads} workloads · ${p.status}`))))
    : h("p", { class: "muted" }, "No policies loaded.");
  const sw = h("span", { class: ["badge", data.action_switch ? "switch-on" : "switch-off"] },
    data.action_switch ? "Action switch ON" : "Action switch off");
  return card("Policies ", body, sw);
}

async function statesCard() {
  const page = await api.get("/workloads", { limit: SAMPLE });
  const counts = new Map();
  for (const w of list(page.items)) counts.set(w.state, (counts.get(w.state) || 0) + 1);
  const rows = [...counts.entries()].sort((a, b) => b[1] - a[1]);
  const body = rows.length
    ? h("ul", { class: "states" }, rows.map(([st, n]) =>
      h("li", {}, h("a", { href: `#/workloads?state=${encodeURIComponent(st)}` }, stateBadge(st)), ` ${n}`)))
    : h("p", { class: "muted" }, "No workloads tracked yet.");
  const note = page.next ? h("p", { class: "muted" }, `Counted over the ${SAMPLE} most recent workloads.`) : null;
  return card("Workloads by state", h("div", {}, body, note));
}

async function anomaliesCard() {
  const page = await api.get("/audit", { kind: "anomaly", limit: 10, order: "desc" });
  const items = list(page.items);
  const table = h("table", { class: "grid" },
    h("thead", {}, h("tr", {}, ["time", "workload", "attempt", "category", "suspects"].map((c) => h("th", {}, c)))),
    h("tbody", {}, items.length ? items.map((r) => h("tr", {},
      h("td", { class: "mono" }, fmtTime(r.time)), h("td", {}, workloadLink(r.workload)), h("td", {}, r.attempt ?? "—"),
      h("td", {}, r.payload.category || "—"), h("td", {}, joined(r.payload.suspect_nodes)))) : emptyRow(5, "No anomalies.")));
  return card("Recent anomalies", table);
}

async function inFlightCard() {
  const page = await api.get("/audit", { limit: 200, order: "desc" });
  const open = new Map();
  const closed = new Set();
  // the engine's recoveries only: a person's change through the API (decided_by "api") is not one
  for (const r of list(page.items).filter((x) => x.decided_by !== "api")) {
    const key = `${r.workload}#${r.attempt}#${r.payload.generation ?? ""}`;
    if (r.kind === "outcome" || r.kind === "watchdog") closed.add(key);
    else if ((r.kind === "advice" || r.kind === "action") && !closed.has(key) && !open.has(key)) open.set(key, r);
  }
  const rows = [...open.values()].filter((r) => r.kind === "action" || (r.payload.action && r.payload.action !== "none"));
  const table = h("table", { class: "grid" },
    h("thead", {}, h("tr", {}, ["since", "workload", "attempt", "step"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.length ? rows.map((r) => h("tr", {},
      h("td", { class: "mono" }, fmtTime(r.time)), h("td", {}, workloadLink(r.workload)), h("td", {}, r.attempt ?? "—"),
      h("td", {}, r.kind === "action" ? `${r.payload.operation} ${r.payload.status}` : `advice: ${r.payload.action}`)))
      : emptyRow(4, "No recovery in flight.")));
  return card("Recoveries in flight", table);
}

async function nodesCard() {
  const data = await api.get("/nodes");
  const items = list(data.items).filter((n) => list(n.incidents).length || list(n.actions).some((a) => a.undoable));
  const body = items.length
    ? h("ul", { class: "nodes" }, items.map((n) => h("li", {}, h("strong", { class: "mono" }, n.node),
      ` ${list(n.incidents).length} incident(s)`, list(n.actions).some((a) => a.undoable) ? h("span", { class: "badge drained" }, "drained by us") : null)))
    : h("p", { class: "muted" }, "No node under suspicion.");
  return card("Nodes under suspicion", body);
}

async function healthCard() {
  const hl = await api.get("/health");
  // ok: true, false, or null (not known yet)
  const line = (label, ok, text) => h("li", {},
    h("span", { class: ["badge", ok === null ? "" : ok ? "ok-badge" : "bad-badge"] }, ok === null ? "?" : ok ? "ok" : "no"),
    ` ${label}`, text ? h("span", { class: "muted" }, ` ${text}`) : null);
  const body = h("ul", { class: "plain health" },
    line("ready", hl.ready, hl.reasons.join("; ")),
    line("scheduler reachable", hl.scheduler.reachable ?? null, hl.scheduler.last_error || ""),
    line("store reachable", hl.store.reachable ?? null, hl.store.last_error || ""),
    line("engine running here", hl.engine_running, hl.standby ? `standby: ${hl.standby}` : ""),
    h("li", { class: "muted" }, `loop lag ${(hl.loop_lag_s * 1000).toFixed(0)} ms · ${hl.tracked_workloads} workloads tracked` +
      (hl.leader === null ? "" : hl.leader ? " · leader" : " · not leader")));
  return card("Engine", body);
}

const CARDS = [policiesCard, healthCard, statesCard, nodesCard, anomaliesCard, inFlightCard];
const WIDE = new Set([anomaliesCard, inFlightCard]);
/** Cards holding a table take the whole row of the grid. */

export async function mount(root, _route, { onLive }) {
  const grid = h("div", { class: "cards" });
  clear(root, h("h1", {}, "Overview"), grid);
  const slots = CARDS.map((make) => h("div", { class: ["slot", WIDE.has(make) ? "wide" : ""] }));
  clear(grid, slots);
  async function refresh() {
    await Promise.all(CARDS.map(async (make, i) => {
      try {
        clear(slots[i], await make());
      } catch (err) {
        clear(slots[i], card(make.name.replace(/Card$/, ""), errorBox(err)));
      }
    }));
  }
  await refresh();
  let timer = null;
  const off = onLive(() => {
    if (timer === null) timer = setTimeout(() => { timer = null; refresh(); }, 400);
  });
  return () => {
    off();
    if (timer !== null) clearTimeout(timer);
  };
}
