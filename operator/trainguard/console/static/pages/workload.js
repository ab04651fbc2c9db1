// One workload: its attempts, each drawn as a timeline picture (SVG): one lane per decision stage
// (detect -> attribute -> policy -> act -> outcome, and the watchdog), a mark per audit record at the
// time it was written, the time each step took, and the time lost from the first anomaly to the end
// of the attempt. Below it the steps as a table and the evidence lines, highlighted.

import * as api from "../api.js";
import { clear, errorBox, fmtDur, fmtTime, h, joined, list, modeBadge, parseTime, s, stateBadge } from "../ui.js";

const LANES = [
  ["anomaly", "detect"],
  ["verdict", "attribute"],
  ["advice", "policy"],
  ["action", "act"],
  ["outcome", "outcome"],
  ["watchdog", "watchdog"],
];
const W = 960;
const LEFT = 92;
const RIGHT = 24;
const TOP = 34;
const LANE_H = 30;

/** A short label for one step of the timeline (the API's summary is the full text). */
export function stepLabel(step) {
  const p = step.payload || {};
  switch (step.kind) {
    case "anomaly": return `${p.symptom || "anomaly"} ${p.category || ""}`.trim();
    case "verdict": return `${p.attribution || "verdict"}${list(p.nodes).length ? " " + p.nodes.join(",") : ""}`;
    case "advice": return `advise ${p.action || "?"}${list(p.exclude_nodes).length ? " −" + p.exclude_nodes.join(",") : ""}`;
    case "action": return `${p.operation || "action"} ${p.status || ""}`.trim();
    case "outcome": return String(p.disposition || "outcome");
    case "watchdog": return `watchdog ${p.reason || ""}`.trim();
    default: return step.kind;
  }
}

function timelineSvg(attempt) {
  const steps = list(attempt.timeline);
  const times = steps.map((st) => parseTime(st.time)).filter((t) => t !== null);
  const started = parseTime(attempt.started_at);
  const ended = parseTime(attempt.ended_at);
  let t0 = Math.min(...[started, ...times].filter((t) => t !== null));
  let t1 = Math.max(...[ended, ...times].filter((t) => t !== null));
  if (!Number.isFinite(t0)) { t0 = Date.now(); t1 = t0 + 1000; }
  if (t1 - t0 < 1000) t1 = t0 + 1000;
  const height = TOP + LANE_H * LANES.length + 26;
  const x = (t) => LEFT + ((t - t0) / (t1 - t0)) * (W - LEFT - RIGHT);
  const laneY = (kind) => TOP + LANE_H * Math.max(0, LANES.findIndex(([k]) => k === kind)) + LANE_H / 2;
  const svg = s("svg", { class: "timeline", viewBox: `0 0 ${W} ${height}`, role: "img",
    "aria-label": `timeline of attempt ${attempt.attempt}`, "data-attempt": attempt.attempt });

  // lanes
  LANES.forEach(([kind, label], i) => {
    const y = TOP + LANE_H * i;
    svg.append(s("rect", { x: 0, y, width: W, height: LANE_H, class: i % 2 ? "lane odd" : "lane" }),
      s("text", { x: 8, y: y + LANE_H / 2 + 4, class: "lane-label" }, label));
  });
  // the attempt's run (start -> end) and the time lost
  const barY = 10;
  if (started !== null) {
    svg.append(s("rect", { x: x(started), y: barY, width: Math.max(2, x(ended ?? t1) - x(started)), height: 10,
      class: `run state-${String(attempt.state).toLowerCase()}` },
    s("title", {}, `attempt ${attempt.attempt}: ${fmtTime(started)} → ${ended ? fmtTime(ended) : "running"} (${attempt.state})`)));
  }
  const firstAnomaly = steps.find((st) => st.kind === "anomaly");
  if (firstAnomaly && attempt.time_lost_s !== null && attempt.time_lost_s !== undefined) {
    const a = parseTime(firstAnomaly.time);
    const b = a + attempt.time_lost_s * 1000;
    svg.append(s("rect", { x: x(a), y: TOP, width: Math.max(2, x(Math.min(b, t1)) - x(a)), height: LANE_H * LANES.length,
      class: "lost" }, s("title", {}, `time lost: ${fmtDur(attempt.time_lost_s * 1000)}`)));
    svg.append(s("text", { x: x(a) + 4, y: barY + 20, class: "lost-label" }, `time lost ${fmtDur(attempt.time_lost_s * 1000)}`));
  }
  // axis
  const axisY = TOP + LANE_H * LANES.length;
  svg.append(s("line", { x1: LEFT, x2: W - RIGHT, y1: axisY, y2: axisY, class: "axis" }));
  for (let i = 0; i <= 4; i++) {
    const t = t0 + ((t1 - t0) * i) / 4;
    svg.append(s("line", { x1: x(t), x2: x(t), y1: axisY, y2: axisY + 4, class: "axis" }),
      s("text", { x: x(t), y: axisY + 16, class: "tick", "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" },
        `+${fmtDur(t - t0)}`));
  }
  // the path from one step to the next, with how long it took
  const points = steps.map((st) => ({ st, t: parseTime(st.time) })).filter((p) => p.t !== null);
  for (let i = 1; i < points.length; i++) {
    const a = points[i - 1];
    const b = points[i];
    const xa = x(a.t);
    const xb = x(b.t);
    svg.append(s("line", { x1: xa, y1: laneY(a.st.kind), x2: xb, y2: laneY(b.st.kind), class: "flow" }));
    if (xb - xa > 44) {
      svg.append(s("text", { x: (xa + xb) / 2, y: (laneY(a.st.kind) + laneY(b.st.kind)) / 2 - 4, class: "dur",
        "text-anchor": "middle" }, fmtDur(b.t - a.t)));
    }
  }
  // one mark per step
  points.forEach(({ st, t }, i) => {
    const cx = x(t);
    const cy = laneY(st.kind);
    const label = stepLabel(st);
    const status = st.payload && st.payload.status ? ` status-${st.payload.status}` : "";
    const g = s("g", { class: `step kind-${st.kind}${status}`, "data-kind": st.kind, "data-label": label,
      "data-operation": (st.payload && st.payload.operation) || "" },
    s("title", {}, `${fmtTime(t)} · ${st.kind} by ${st.decided_by}\n${st.summary}`),
    s("circle", { cx, cy, r: 6 }),
    s("text", { x: cx + 9, y: cy + (i % 2 ? 11 : -3), class: "step-label" }, label));
    svg.append(g);
  });
  return svg;
}

function evidenceBlock(steps) {
  const rows = [];
  for (const st of steps) {
    for (const ev of list(st.evidence)) {
      rows.push(h("li", { class: "evidence-line" },
        h("span", { class: "line-no mono" }, ev.line ?? "·"),
        h("mark", { class: "mono" }, ev.text),
        ev.pattern ? h("span", { class: "pattern" }, ev.pattern) : null));
    }
  }
  if (!rows.length) return null;
  const suspects = [...new Set(steps.flatMap((st) => list(st.suspect_nodes)))];
  const ranks = [...new Set(steps.flatMap((st) => list(st.suspect_ranks)))];
  return h("div", { class: "evidence" }, h("h4", {}, "Evidence"),
    h("p", { class: "muted" }, `suspect nodes: ${joined(suspects)} · suspect ranks: ${joined(ranks)}`),
    h("ol", {}, rows));
}

function stepsTable(steps) {
  return h("table", { class: "grid steps" },
    h("thead", {}, h("tr", {}, ["time", "+", "kind", "decided by", "what"].map((c) => h("th", {}, c)))),
    h("tbody", {}, steps.map((st) => h("tr", { class: `kind-${st.kind}` },
      h("td", { class: "mono" }, fmtTime(st.time)),
      h("td", { class: "mono" }, st.since_previous_s === null || st.since_previous_s === undefined ? "" : fmtDur(st.since_previous_s * 1000)),
      h("td", {}, st.kind), h("td", {}, st.decided_by), h("td", {}, st.summary)))));
}

function attemptSection(attempt) {
  const steps = list(attempt.timeline);
  return h("section", { class: "attempt", "data-attempt": attempt.attempt },
    h("h3", {}, `Attempt ${attempt.attempt} `, stateBadge(attempt.state),
      h("span", { class: "muted" }, ` ${fmtTime(attempt.started_at)} → ${attempt.ended_at ? fmtTime(attempt.ended_at) : "…"}` +
        ` · nodes ${joined(attempt.nodes)}` + (attempt.checkpoint_saved ? " · checkpoint saved" : ""))),
    steps.length ? timelineSvg(attempt) : h("p", { class: "muted" }, "Nothing recorded for this attempt: healthy so far."),
    steps.length ? stepsTable(steps) : null,
    evidenceBlock(steps));
}

function jobLink(w) {
  if (w.job_url) return h("a", { href: w.job_url, rel: "noreferrer", target: "_blank" }, `${w.scheduler} job ${w.job_id}`);
  return h("span", {}, `${w.scheduler} job `, h("code", {}, w.job_id),
    h("span", { class: "muted" }, w.scheduler && w.scheduler.startsWith("slurm") ? ` (scontrol show job ${w.job_id})` : ""));
}

export async function mount(root, route, { onLive }) {
  const id = route.arg;
  const body = h("div");
  clear(root, h("p", {}, h("a", { href: "#/workloads" }, "← Workloads")), body);

  async function load() {
    try {
      const detail = await api.get(`/workloads/${api.wid(id)}`);
      const w = detail.workload;
      clear(body,
        h("h1", { class: "mono" }, w.workload),
        h("p", { class: "meta" }, stateBadge(w.state), " ", modeBadge(w.mode), " policy ", h("strong", {}, w.policy || "—"),
          " · ", jobLink(w), ` · first seen ${fmtTime(w.first_seen)} · ${w.anomalies} anomalies`),
        detail.comment ? h("p", { class: "muted" }, "comment: ", h("code", {}, detail.comment)) : null,
        list(w.opt_in_errors).length ? h("div", { class: "error" }, `opt-in: ${w.opt_in_errors.join("; ")}`) : null,
        detail.timeline_truncated ? h("p", { class: "muted" }, "Older records are left out here: ",
          h("a", { href: `#/audit?workload=${encodeURIComponent(id)}` }, "see the audit search")) : null,
        list(detail.attempts).slice().reverse().map(attemptSection),
        h("p", {}, h("a", { href: `#/audit?workload=${encodeURIComponent(id)}` }, "Audit records of this workload")));
    } catch (err) {
      clear(body, h("h1", { class: "mono" }, id), errorBox(err));
    }
  }
  await load();
  let timer = null;
  const off = onLive((ev) => {
    const target = ev.data && typeof ev.data === "object" ? ev.data.workload : undefined;
    if (target !== undefined && target !== id) return;
    if (timer === null) timer = setTimeout(() => { timer = null; load(); }, 300);
  });
  return () => {
    off();
    if (timer !== null) clearTimeout(timer);
  };
}
