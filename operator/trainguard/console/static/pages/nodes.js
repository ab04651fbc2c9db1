// Nodes: each node's lifecycle state (in service, suspect, out of service, validating, held for
// repair, someone else's), since when, why and who decided; its history of transitions with their
// evidence and its incidents (click the node); the changes we made (drain, resume) with an undo of
// our own drains. A user with the write role may hold a node for repair or return it, giving a
// reason. The API re-checks everything (the lifecycle's rules, ours? still drained?) and answers
// 403 to a read-only user, 409 when the lifecycle refuses: that answer is shown as it is.

import * as api from "../api.js";
import { act, clear, emptyRow, errorBox, fmtTime, h, list, workloadLink } from "../ui.js";

export const STATES = ["in-service", "suspect", "out-of-service", "validating", "held-for-repair", "other"];
const OURS = new Set(["out-of-service", "validating", "held-for-repair"]);
const COLS = 8;

export function lifecycleBadge(state) {
  const st = String(state || "in-service");
  const known = STATES.includes(st);
  return h("span", { class: ["badge", "lifecycle", known ? `lc-${st}` : "lc-unknown"], "data-lifecycle": st }, st);
}

/** Whose the node is now: ours (out by our doing), someone else's (never touched), or in service. */
export function whose(state) {
  if (OURS.has(state)) return "ours";
  if (state === "other") return "someone else's: never touched";
  return "in service";
}

/** A transition's evidence as text: key, value; an output tail as a preformatted block. */
function evidenceOf(evidence) {
  const entries = Object.entries(evidence || {}).filter(([, v]) => v !== null && v !== undefined && v !== "");
  if (!entries.length) return h("span", { class: "muted" }, "—");
  return h("dl", { class: "evidence-kv" }, entries.map(([k, v]) => {
    const text = typeof v === "string" ? v : Array.isArray(v) ? v.map(String).join(" ") : JSON.stringify(v);
    const block = typeof v === "string" && (v.includes("\n") || k.endsWith("tail"));
    return [h("dt", {}, k), h("dd", { "data-key": k }, block ? h("pre", { class: "mono" }, text) : h("span", { class: "mono" }, text))];
  }));
}

function detailOf(detail) {
  const history = list(detail.history);
  const incidents = list(detail.incidents);
  return h("div", { class: "node-detail-body" },
    h("h3", {}, "History"),
    h("table", { class: "grid history" },
      h("thead", {}, h("tr", {}, ["time", "event", "state", "decided by", "reason", "evidence", "workload"].map((c) => h("th", {}, c)))),
      h("tbody", {}, history.length ? history.slice().reverse().map((t) => h("tr", { "data-event": t.event },
        h("td", { class: "mono" }, fmtTime(t.at)),
        h("td", {}, t.event),
        h("td", {}, lifecycleBadge(t.state)),
        h("td", { class: "mono" }, t.by),
        h("td", { class: "summary" }, t.reason || "—"),
        h("td", {}, evidenceOf(t.evidence)),
        h("td", {}, t.workload ? [workloadLink(t.workload), t.attempt !== null && t.attempt !== undefined ? ` #${t.attempt}` : ""] : "—")))
        : emptyRow(7, "No transition recorded: in service as far as Trainguard knows."))),
    h("h3", {}, "Incidents"),
    incidents.length ? h("ul", { class: "plain incidents" }, incidents.map((i) =>
      h("li", {}, `${fmtTime(i.at)} ${i.category} `, workloadLink(i.workload), ` #${i.attempt}`)))
      : h("p", { class: "muted" }, "No incident charged to this node."));
}

export async function mount(root, _route, { session, onLive }) {
  const body = h("div");
  const notice = h("div", { role: "status", id: "nodes-notice" });
  const filter = h("select", { id: "nodes-state", "aria-label": "state" });
  const open = new Set(); // nodes whose detail is shown
  let items = [];
  clear(root, h("h1", {}, "Nodes"), notice,
    h("form", { class: "filters", onsubmit: (ev) => ev.preventDefault() }, h("label", { for: "nodes-state" }, "state"), filter),
    body);
  filter.addEventListener("change", () => render());

  function undo(node, button) {
    return act(notice, button, () => api.post(`/nodes/${encodeURIComponent(node)}/undo-drain`, {}),
      `undo of our drain of ${node} requested`, load);
  }

  function decide(node, verb, button) {
    const question = verb === "hold"
      ? `Why hold ${node} for repair? (recorded with your name; no rule of time returns it until a person does)`
      : `Why return ${node} to service? (recorded with your name; the engine resumes it at its next sweep)`;
    const reason = window.prompt(question);
    if (!reason || !reason.trim()) return null;
    return act(notice, button, () => api.post(`/nodes/${encodeURIComponent(node)}/${verb}`, { reason: reason.trim() }),
      `${node}: ${verb} recorded`, load);
  }

  function decisionButton(n, verb, label, help) {
    const button = h("button", { type: "button", class: "secondary", "data-decide": verb,
      disabled: !session.canWrite(), title: session.canWrite() ? help : "needs the write role" }, label);
    button.addEventListener("click", () => decide(n.node, verb, button));
    return button;
  }

  function detailRow(node) {
    const cell = h("td", { colspan: COLS }, h("p", { class: "muted" }, "Loading…"));
    const row = h("tr", { class: "node-detail", "data-detail": node }, cell);
    api.get(`/nodes/${encodeURIComponent(node)}`)
      .then((detail) => clear(cell, detailOf(detail)))
      .catch((err) => clear(cell, errorBox(err)));
    return row;
  }

  function rowOf(n) {
    const state = n.state || "in-service";
    const undoable = list(n.actions).some((a) => a.undoable);
    const undoButton = undoable ? h("button", { type: "button", class: "danger", disabled: !session.canWrite(),
      title: session.canWrite() ? "resume the node (only our own drain is undone)" : "needs the write role" }, "Undo our drain") : null;
    if (undoButton) undoButton.addEventListener("click", () => undo(n.node, undoButton));
    const expanded = open.has(n.node);
    const toggle = h("button", { type: "button", class: "linklike mono", "aria-expanded": String(expanded),
      title: "history and incidents" }, `${expanded ? "▾" : "▸"} `, n.node);
    toggle.addEventListener("click", () => {
      if (open.has(n.node)) open.delete(n.node);
      else open.add(n.node);
      render();
    });
    // someone else's node is shown, never touched: no decision is offered on it
    const decisions = state === "other" ? [] : [
      decisionButton(n, "hold", "Hold", "hold for repair: it stays out until a person returns it"),
      decisionButton(n, "return", "Return", "return to service: the engine resumes our drain at its next sweep"),
    ];
    return h("tr", { "data-node": n.node, "data-state": state },
      h("td", { class: "node-name" }, toggle),
      h("td", {}, lifecycleBadge(state)),
      h("td", { class: "mono" }, n.since ? fmtTime(n.since) : "—", n.by ? h("div", { class: "muted" }, `by ${n.by}`) : null),
      h("td", { class: "summary reason" }, n.reason || "—"),
      h("td", { class: "whose" }, whose(state)),
      h("td", {}, h("ul", { class: "plain" }, list(n.incidents).map((i) =>
        h("li", {}, `${fmtTime(i.at)} ${i.category} `, workloadLink(i.workload), ` #${i.attempt}`)))),
      h("td", {}, h("ul", { class: "plain" }, list(n.actions).map((a) =>
        h("li", {}, `${fmtTime(a.at)} ${a.operation} ${a.status}${a.error ? " " + a.error : ""} `, workloadLink(a.workload))))),
      h("td", { class: "decisions" }, decisions, undoButton));
  }

  function fillFilter() {
    const chosen = filter.value;
    const counts = Object.fromEntries(STATES.map((st) => [st, 0]));
    for (const n of items) counts[n.state || "in-service"] = (counts[n.state || "in-service"] || 0) + 1;
    clear(filter, h("option", { value: "" }, `all states (${items.length})`),
      STATES.map((st) => h("option", { value: st }, `${st} (${counts[st]})`)));
    filter.value = chosen;
  }

  let since = "";
  function render() {
    const chosen = filter.value;
    const shown = items.filter((n) => !chosen || (n.state || "in-service") === chosen);
    const rows = [];
    for (const n of shown) {
      rows.push(rowOf(n));
      if (open.has(n.node)) rows.push(detailRow(n.node));
    }
    clear(body, h("p", { class: "muted" }, `incidents and our changes since ${fmtTime(since)}; lifecycle states as recorded`),
      h("table", { class: "grid", id: "nodes-table" },
        h("thead", {}, h("tr", {}, ["node", "state", "since", "reason", "whose", "incidents", "our changes", ""].map((c) => h("th", {}, c)))),
        h("tbody", {}, rows.length ? rows
          : emptyRow(COLS, items.length ? "No node in this state." : "No node has a history with us."))));
  }

  async function load() {
    try {
      const data = await api.get("/nodes");
      items = list(data.items);
      since = data.since;
      fillFilter();
      render();
    } catch (err) {
      clear(body, errorBox(err));
    }
  }
  await load();
  let timer = null;
  const off = onLive(() => {
    if (timer === null) timer = setTimeout(() => { timer = null; load(); }, 500);
  });
  return () => {
    off();
    if (timer !== null) clearTimeout(timer);
  };
}
