// Scorecard: each Monitor-mode advice scored by what Slurm and people did next, and each policy's
// "ready for Action" signal with the rule behind it (docs/scorecard.md). Read-only.

import * as api from "../api.js";
import { clear, emptyRow, errorBox, h, list, workloadLink } from "../ui.js";

function pct(rate) {
  return rate === null || rate === undefined ? "n/a" : `${Math.round(rate * 100)} %`;
}

export async function mount(root, route, { onLive }) {
  const body = h("div");
  clear(root, h("h1", {}, "Scorecard"),
    h("p", { class: "muted" }, "Monitor-mode advice, scored by what happened next: agree, disagree, would-have-helped or unknown."),
    body);

  async function load() {
    try {
      const query = route.query && route.query.policy ? `?policy=${encodeURIComponent(route.query.policy)}` : "";
      const data = await api.get(`/scorecard${query}`);
      const summaries = list(data.summaries);
      const items = list(data.items);
      clear(body,
        h("h2", {}, "Policies"),
        h("table", { class: "grid", id: "scorecard-policies" },
          h("thead", {}, h("tr", {}, ["policy", "advice", "scored", "agreement", "harmful", "GPU-hours saved (est.)", "ready for Action"]
            .map((c) => h("th", {}, c)))),
          h("tbody", {}, summaries.length ? summaries.map((s) => h("tr", { "data-policy": s.policy },
            h("td", { class: "mono" }, s.policy || "(none)"),
            h("td", {}, String(s.advice)),
            h("td", {}, `${s.scored} (${s.agree} agree, ${s.would_have_helped} would-have-helped, ${s.disagree} disagree, ${s.unknown} unknown)`),
            h("td", {}, pct(s.agreement_rate)),
            h("td", {}, String(s.harmful)),
            h("td", {}, String(s.gpu_hours_saved)),
            h("td", { class: s.ready_for_action ? "ok" : "muted", title: s.readiness_rule, "data-ready": String(s.ready_for_action) },
              s.ready_for_action ? "ready" : `not ready: ${list(s.not_ready_because).join("; ")}`)))
            : emptyRow(7, "No Monitor-mode advice recorded yet."))),
        h("h2", {}, "Advice"),
        h("table", { class: "grid", id: "scorecard-advice" },
          h("thead", {}, h("tr", {}, ["workload", "advice", "nodes", "score", "detail", "evidence"].map((c) => h("th", {}, c)))),
          h("tbody", {}, items.length ? items.map((r) => h("tr", { "data-workload": r.workload, "data-score": r.score },
            h("td", {}, workloadLink(r.workload), ` #${r.attempt}`),
            h("td", {}, `${r.advice} (${r.policy})`),
            h("td", { class: "mono" }, list(r.nodes).join(", ") || "-"),
            h("td", {}, r.score + (r.harmful ? " (harmful)" : "")),
            h("td", {}, r.detail),
            h("td", {}, h("ul", { class: "plain" }, list(r.evidence).map((e) => h("li", {}, e))))))
            : emptyRow(6, "Nothing to score."))));
    } catch (err) {
      clear(body, errorBox(err));
    }
  }
  await load();
  let timer = null;
  // Each load reads the scheduler (jobs, nodes): at most one every 5 s however busy the live stream is.
  const off = onLive(() => {
    if (timer === null) timer = setTimeout(() => { timer = null; load(); }, 5000);
  });
  return () => {
    off();
    if (timer !== null) clearTimeout(timer);
  };
}
