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
const RIGHT = 40;
const TOP = 34;
const LANE_H = 34;

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
  // Two scales in one picture. The band on top is proportional to wall time: the attempt's run,
  // with the time lost (first anomaly -> end of the attempt) shaded. The lanes below place the
  // decision steps one after the other at equal distances, because they usually happen within a
  // second at the very end of a long run, and write on each link how long that step took.
  const steps = list(attempt.timeline).filter((st) => parseTime(st.time) !== null);
  const times = steps.map((st) => parseTime(st.time));
  const started = parseTime(attempt.started_at);
  const ended = parseTime(attempt.ended_at);
  const t0 = Math.min(...[started, ...times].filter((t) => t !== null));
  let t1 = Math.max(...[ended, ...times].filter((t) => t !== null));
  if (t1 - t0 < 1) t1 = t0 + 1;
  const bandTop = 8;
  const lanesTop = TOP + 18;
  const axisY = lanesTop + LANE_H * LANES.length;
  const height = axisY + 34;
  const span = W - LEFT - RIGHT;
  const tx = (t) => LEFT + ((t - t0) / (t1 - t0)) * span;
  const step = steps.length > 1 ? span / (steps.length - 1 + 0.8) : 0;
  const sx = (i) => LEFT + 12 + i * step;
  const laneY = (kind) => lanesTop + LANE_H * Math.max(0, LANES.findIndex(([k]) => k === kind)) + LANE_H / 2;
  const svg = s("svg", { class: "timeline", viewBox: `0 0 ${W} ${height}`, role: "img",
    "aria-label": `timeline of attempt ${attempt.attempt}`, "data-attempt": attempt.attempt });

  // the band: the run in wall time, and the time lost
  svg.append(s("text", { x: 8, y: bandTop + 11, class: "lane-label" }, "run"));
  if (started !== null) {
    const end = ended ?? t1;
    svg.append(s("rect", { x: tx(started), y: bandTop, width: Math.max(2, tx(end) - tx(started)), height: 14,
      class: `run state-${String(attempt.state).toLowerCase()}` },
    s("title", {}, `attempt ${attempt.attempt}: ${fmtTime(started)} → ${ended ? fmtTime(ended) : "running"} (${attempt.state})`)));
    svg.append(s("text", { x: tx(started) + 4, y: bandTop + 26, class: "tick" }, `ran ${fmtDur(end - started)}`));
  }
  const firstAnomaly = steps.find((st) => st.kind === "anomaly");
  if (firstAnomaly && attempt.time_lost_s !== null && attempt.time_lost_s !== undefined) {
    const a = parseTime(firstAnomaly.time);
    const b = Math.min(a + attempt.time_lost_s * 1000, t1);
    const lost = `time lost ${fmtDur(attempt.time_lost_s * 1000)}`;
    svg.append(s("rect", { x: tx(a), y: bandTop - 3, width: Math.max(3, tx(b) - tx(a)), height: 20, class: "lost" },
      s("title", {}, `${lost}: first anomaly ${fmtTime(a)} → end of the attempt`)));
    svg.append(s("text", { x: Math.min(tx(a), W - RIGHT), y: bandTop + 26, class: "lost-label", "text-anchor": "end" }, lost));
  }
  // the lanes
  LANES.forEach(([, label], i) => {
    const y = lanesTop + LANE_H * i;
    svg.append(s("rect", { x: 0, y, width: W, height: LANE_H, class: i % 2 ? "lane odd" : "lane" }),
      s("text", { x: 8, y: y + LANE_H / 2 + 4, class: "lane-label" }, label));
  });
  svg.append(s("line", { x1: LEFT, x2: W - RIGHT, y1: axisY, y2: axisY, class: "axis" }));
  // the links between steps, each with the time it took
  for (let i = 1; i < steps.length; i++) {
    const ya = laneY(steps[i - 1].kind);
    const yb = laneY(steps[i].kind);
    svg.append(s("line", { x1: sx(i - 1), y1: ya, x2: sx(i), y2: yb, class: "flow" }));
    svg.append(s("text", { x: (sx(i - 1) + sx(i)) / 2, y: axisY + 26, class: "dur", "text-anchor": "middle" },
      `+${fmtDur(times[i] - times[i - 1])}`));
  }
  // one mark per step, its label above or below (alternating, so neighbours do not collide)
  steps.forEach((st, i) => {
    const cx = sx(i);
    const cy = laneY(st.kind);
    const label = stepLabel(st);
    const status = st.payload && st.payload.status ? ` status-${st.payload.status}` : "";
    svg.append(s("g", { class: `step kind-${st.kind}${status}`, "data-kind": st.kind, "data-label": label,
      "data-operation": (st.payload && st.payload.operation) || "" },
    s("title", {}, `${fmtTime(times[i])} · ${st.kind} by ${st.decided_by}\n${st.summary}`),
    s("line", { x1: cx, x2: cx, y1: cy, y2: axisY, class: "drop" }),
    s("circle", { cx, cy, r: 6 }),
    s("text", { x: cx, y: cy + (i % 2 ? 17 : -9), class: "step-label", "text-anchor": "middle" }, label),
    s("text", { x: cx, y: axisY + 12, class: "tick", "text-anchor": "middle" }, fmtClock(times[i]))));
  });
  return svg;
}

/** hh:mm:ss.mmm (UTC), for the marks' axis. */
function fmtClock(t) {
  return fmtTime(t).slice(11, 23);
}

function evidenceBlock(steps) {
  const lines = new Map(); // one row per log line, every catalog pattern it matched as a chip
  for (const st of steps) {
    for (const ev of list(st.evidence)) {
      const key = `${ev.line}\u0000${ev.text}`;
      if (!lines.has(key)) lines.set(key, { line: ev.line, text: ev.text, patterns: [] });
      if (ev.pattern && !lines.get(key).patterns.includes(ev.pattern)) lines.get(key).patterns.push(ev.pattern);
    }
  }
  if (!lines.size) return null;
  const suspects = [...new Set(steps.flatMap((st) => list(st.suspect_nodes)))];
  const ranks = [...new Set(steps.flatMap((st) => list(st.suspect_ranks)))];
  return h("div", { class: "evidence" }, h("h4", {}, "Evidence"),
    h("p", { class: "muted" }, `suspect nodes: ${joined(suspects)} · suspect ranks: ${joined(ranks)}`),
    h("ol", {}, [...lines.values()].map((ev) => h("li", { class: "evidence-line" },
      h("span", { class: "line-no mono" }, ev.line ?? "·"),
      h("mark", { class: "mono" }, ev.text),
      ev.patterns.map((p) => h("span", { class: "pattern" }, p))))));
}

function stepsTable(steps) {
  return h("table", { class: "grid steps" },
    h("thead", {}, h("tr", {}, ["time", "+", "kind", "decided by", "what"].map((c) => h("th", {}, c)))),
    h("tbody", {}, steps.map((st) => h("tr", { class: `kind-${st.kind}` },
      h("td", { class: "mono" }, fmtTime(st.time)),
      h("td", { class: "mono" }, st.since_previous_s === null || st.since_previous_s === undefined ? "" : fmtDur(st.since_previous_s * 1000)),
      h("td", {}, st.kind), h("td", {}, st.decided_by), h("td", {}, st.summary)))));
}

/** An attempt followed by another has ended at the latest when the next one started, even if its own
 * end was never recorded: the picture and the time lost stop there instead of running on to now. */
function bounded(attempt, next) {
  const nextStart = next ? parseTime(next.started_at) : null;
  if (nextStart === null || (attempt.ended_at && parseTime(attempt.ended_at) <= nextStart)) return attempt;
  const out = { ...attempt, ended_at: next.started_at };
  const first = list(attempt.timeline).find((st) => st.kind === "anomaly");
  if (first && parseTime(first.time) !== null) out.time_lost_s = Math.max(0, (nextStart - parseTime(first.time)) / 1000);
  return out;
}

function attemptSection(attempt) {
  const steps = list(attempt.timeline);
  return h("section", { class: "attempt", "data-attempt": attempt.attempt },
    h("h3", {}, `Attempt ${attempt.attempt} `, stateBadge(attempt.state),
      h("span", { class: "muted" }, ` ${fmtTime(attempt.started_at)} → ${attempt.ended_at ? fmtTime(attempt.ended_at) : "…"}` +
        ` · nodes ${joined(attempt.nodes)}` + (attempt.checkpoint_saved ? " · checkpoint saved" : ""))),
    steps.length ? timelineSvg(attempt) : h("p", { class: "muted" }, "No anomaly and no decision recorded for this attempt."),
    steps.length ? stepsTable(steps) : null,
    evidenceBlock(steps));
}

function jobLink(w) {
  if (w.job_url) return h("a", { href: w.job_url, rel: "noreferrer", target: "_blank" }, `${w.scheduler} job ${w.job_id}`);
  return h("span", {}, `${w.scheduler} job `, h("code", {}, w.job_id),
    h("span", { class: "muted" }, w.scheduler && w.scheduler.startsWith("slurm") ? ` (scontrol show job ${w.job_id})` : ""));
}

/** Acknowledge the workload (write role): an audit record with the note and who wrote it. */
function ackForm(id, session, notice, reload) {
  const note = h("input", { name: "note", placeholder: "note (optional)", size: 40, maxlength: 1000 });
  const button = h("button", { type: "submit", disabled: session.role === "read",
    title: session.role === "read" ? "needs the write role" : "record that you have seen this" }, "Acknowledge");
  const form = h("form", { class: "ack", id: "ack-form" }, note, button);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    button.disabled = true;
    try {
      const result = await api.post(`/workloads/${api.wid(id)}/acknowledge`, { note: note.value.trim() });
      clear(notice, h("div", { class: "ok" }, result.message || "acknowledged"));
      note.value = "";
      await reload();
    } catch (err) {
      clear(notice, errorBox(err));
    } finally {
      button.disabled = session.role === "read";
    }
  });
  return form;
}

export async function mount(root, route, { session, onLive }) {
  const id = route.arg;
  const body = h("div");
  const notice = h("div", { role: "status", id: "workload-notice" });
  clear(root, h("p", {}, h("a", { href: "#/workloads" }, "← Workloads")), notice, body);

  async function load() {
    try {
      const detail = await api.get(`/workloads/${api.wid(id)}`);
      const w = detail.workload;
      clear(body,
        h("h1", { class: "mono" }, w.workload),
        h("p", { class: "meta" }, stateBadge(w.state), " ", modeBadge(w.mode), " policy ", h("strong", {}, w.policy || "—"),
          " · ", jobLink(w), ` · first seen ${fmtTime(w.first_seen)} · ${w.anomalies} ${w.anomalies === 1 ? "anomaly" : "anomalies"}`),
        detail.comment ? h("p", { class: "muted" }, "comment: ", h("code", {}, detail.comment)) : null,
        list(w.opt_in_errors).length ? h("div", { class: "error" }, `opt-in: ${w.opt_in_errors.join("; ")}`) : null,
        ackForm(id, session, notice, load),
        detail.timeline_truncated ? h("p", { class: "muted" }, "Older records are left out here: ",
          h("a", { href: `#/audit?workload=${encodeURIComponent(id)}` }, "see the audit search")) : null,
        list(detail.attempts).slice().sort((a, b) => a.attempt - b.attempt)
          .map((a, i, all) => bounded(a, all[i + 1])).reverse().map(attemptSection),
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
