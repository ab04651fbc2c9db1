// Policies: effective mode (a prominent MONITOR/ACTION badge), declared mode, covered workloads,
// status and spec; a mode switch for users with the write role. A read-only user sees the switch
// disabled; if the role is not known the switch is offered and the API's 403 is shown.

import * as api from "../api.js";
import { act, clear, errorBox, h, list, modeBadge } from "../ui.js";

export async function mount(root, _route, { session, onLive }) {
  const body = h("div");
  const notice = h("div", { role: "status", id: "policy-notice" });
  clear(root, h("h1", {}, "Policies"), notice, body);

  function switchMode(policy, mode, button) {
    return act(notice, button, () => api.post(`/policies/${encodeURIComponent(policy.name)}/mode`, { mode }),
      `${policy.name}: mode ${mode}`, load);
  }

  async function load() {
    try {
      const data = await api.get("/policies");
      const items = list(data.items);
      const readOnly = session.role === "read";
      clear(body,
        h("p", {}, "Cluster-wide Action switch: ",
          h("span", { class: ["badge", data.action_switch ? "switch-on" : "switch-off"] }, data.action_switch ? "ON" : "off"),
          data.action_switch ? "" : h("span", { class: "muted" }, " (every policy acts as Monitor until trainguard runs with --mode action)")),
        items.map((p) => {
          const target = p.declared_mode === "Action" ? "Monitor" : "Action";
          const button = h("button", { type: "button", class: target === "Action" ? "danger" : "", disabled: readOnly,
            "data-switch": p.name, title: readOnly ? "needs the write role" : `declare ${target}` }, `Switch to ${target}`);
          button.addEventListener("click", () => switchMode(p, target, button));
          return h("div", { class: "card policy", "data-policy": p.name },
            h("h2", {}, modeBadge(p.mode), " ", p.name),
            h("p", {}, `declared ${p.declared_mode} · ${p.covered_workloads} covered workloads · status ${p.status}`,
              p.mode_switched_by ? ` · switched by ${p.mode_switched_by}` : ""),
            h("p", {}, button, readOnly ? h("span", { class: "muted" }, " read-only: switching needs the write role") : null),
            h("details", {}, h("summary", {}, "effective spec"), h("pre", { class: "mono" }, JSON.stringify(p.spec, null, 2))));
        }));
    } catch (err) {
      clear(body, errorBox(err));
    }
  }
  await load();
  let timer = null;
  const off = onLive((ev) => {
    // a mode switch is audited under the workload "policy:NAME" (by whoever made it, here or elsewhere)
    const target = ev.data && typeof ev.data === "object" ? String(ev.data.workload || "") : "";
    if (!target.startsWith("policy:")) return;
    if (timer === null) timer = setTimeout(() => { timer = null; load(); }, 300);
  });
  return () => {
    off();
    if (timer !== null) clearTimeout(timer);
  };
}
