// Backtest: paste a changed policy (RecoveryPolicy YAML), replay the recorded decisions under it
// (POST /api/v1/backtest: the read role may, nothing changes) and see each decision that would
// differ, with the summary. The server bounds the run time and caps the rows it returns.

import * as api from "../api.js";
import { clear, emptyRow, errorBox, h, joined, list, workloadLink } from "../ui.js";

function fmtEpoch(seconds) {
  return new Date(seconds * 1000).toISOString().replace(".000Z", "Z");
}

function summaryBox(s) {
  return h("div", { class: "card", id: "backtest-summary" },
    h("p", {}, `${s.decisions} decisions of ${s.workloads} workloads replayed; `,
      h("strong", {}, `${s.changed_decisions} differ`), ` (${s.workloads_affected} workloads affected)`),
    h("p", {}, `requeues ${s.requeues_recorded} → ${s.requeues_replayed} (+${s.extra_requeues} / −${s.removed_requeues}); `,
      `nodes excluded ${list(s.nodes_excluded_recorded).length} → ${list(s.nodes_excluded_replayed).length}; `,
      `drained ${list(s.nodes_drained_recorded).length} → ${list(s.nodes_drained_replayed).length}; `,
      `${s.blocked_by_limits} blocked by blast-radius limits; ${s.not_covered} not covered`),
    h("ul", { class: "muted" }, list(s.notes).map((n) => h("li", {}, n))));
}

function rowsTable(rows) {
  return h("table", { class: "grid", id: "backtest-table" },
    h("thead", {}, h("tr", {}, ["time", "workload", "attempt", "category", "recorded", "replayed", "exclusions",
      "drains", "blocked by"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.length ? rows.map((r) => h("tr", { "data-workload": r.workload, class: r.differs ? "differs" : "" },
      h("td", {}, fmtEpoch(r.time)),
      h("td", {}, workloadLink(r.workload)),
      h("td", {}, String(r.attempt)),
      h("td", {}, r.category),
      h("td", {}, r.recorded),
      h("td", {}, h("strong", {}, r.replayed), r.after_change ? h("span", { class: "muted" }, " (after an earlier change)") : ""),
      h("td", {}, `${joined(r.recorded_exclusions)} → ${joined(r.replayed_exclusions)}`),
      h("td", {}, `${joined(r.recorded_drains)} → ${joined(r.replayed_drains)}`),
      h("td", {}, r.blocked_by || ""))) : emptyRow(9, "no decision would differ")));
}

export async function mount(root, _route, _ctx) {
  const policy = h("textarea", { id: "backtest-policy", rows: 12, cols: 80, spellcheck: "false",
    placeholder: "apiVersion: trainguard.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata: {name: default}\nspec: ..." });
  const workload = h("input", { id: "backtest-workload", placeholder: "workload id (optional)" });
  const every = h("input", { id: "backtest-all", type: "checkbox" });
  const run = h("button", { type: "button", id: "backtest-run" }, "Replay");
  const result = h("div", { id: "backtest-result", role: "status" });
  clear(root, h("h1", {}, "Backtest"),
    h("p", { class: "muted" }, "Replays the signal journal's recorded decisions (their inputs and clock) under a changed policy. Nothing is changed."),
    policy, h("p", {}, workload, " ", h("label", {}, every, " every decision"), " ", run), result);

  run.addEventListener("click", async () => {
    run.disabled = true;
    clear(result, h("p", { class: "muted" }, "replaying…"));
    try {
      const body = { policy: policy.value, all: every.checked };
      if (workload.value.trim()) body.workload = workload.value.trim();
      const data = await api.post("/backtest", body);
      clear(result, summaryBox(data.summary), rowsTable(list(data.rows)),
        data.truncated ? h("p", { class: "muted" }, "more rows differ than shown: narrow by workload or use `trainguard backtest`") : "");
    } catch (err) {
      clear(result, errorBox(err));
    } finally {
      run.disabled = false;
    }
  });
  return () => {};
}
