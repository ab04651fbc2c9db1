// Nodes: suspect/lemon history and the changes we made (drain, resume), with an undo of our own
// drains for users with the write role. The API re-checks everything (ours? still drained?) and
// answers 403 to a read-only user: that answer is shown as it is.

import * as api from "../api.js";
import { act, clear, emptyRow, errorBox, fmtTime, h, list, workloadLink } from "../ui.js";

export async function mount(root, _route, { session, onLive }) {
  const body = h("div");
  const notice = h("div", { role: "status" });
  clear(root, h("h1", {}, "Nodes"), notice, body);

  function undo(node, button) {
    return act(notice, button, () => api.post(`/nodes/${encodeURIComponent(node)}/undo-drain`, {}),
      `undo of our drain of ${node} requested`, load);
  }

  async function load() {
    try {
      const data = await api.get("/nodes");
      const items = list(data.items);
      clear(body, h("p", { class: "muted" }, `history since ${fmtTime(data.since)}`),
        h("table", { class: "grid", id: "nodes-table" },
          h("thead", {}, h("tr", {}, ["node", "incidents", "our changes", ""].map((c) => h("th", {}, c)))),
          h("tbody", {}, items.length ? items.map((n) => {
            const undoable = list(n.actions).some((a) => a.undoable);
            const button = undoable ? h("button", { type: "button", class: "danger", disabled: !session.canWrite(),
              title: session.canWrite() ? "resume the node (only our own drain is undone)" : "needs the write role" }, "Undo our drain") : null;
            if (button) button.addEventListener("click", () => undo(n.node, button));
            return h("tr", { "data-node": n.node },
              h("td", { class: "mono" }, n.node),
              h("td", {}, h("ul", { class: "plain" }, list(n.incidents).map((i) =>
                h("li", {}, `${fmtTime(i.at)} ${i.category} `, workloadLink(i.workload), ` #${i.attempt}`)))),
              h("td", {}, h("ul", { class: "plain" }, list(n.actions).map((a) =>
                h("li", {}, `${fmtTime(a.at)} ${a.operation} ${a.status}${a.error ? " " + a.error : ""} `, workloadLink(a.workload))))),
              h("td", {}, button));
          }) : emptyRow(4, "No node has a history with us."))));
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
