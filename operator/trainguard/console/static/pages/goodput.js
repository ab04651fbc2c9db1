// Goodput: time lost to failures by cause over time (a stacked SVG bar chart of the failures'
// lost seconds, binned by the failure's onset) and the table of `trainguard goodput`, grouped by
// workload, category, node or policy. The figures and the "without Trainguard" estimate are the
// server's (GET /api/v1/goodput, docs/goodput.md); this page only draws them.

import * as api from "../api.js";
import { clear, emptyRow, errorBox, fmtDur, fmtTime, h, list, parseTime, s, workloadLink } from "../ui.js";

export const CAUSES = ["work_lost", "detection", "decision", "action", "requeue_wait"];
const LABELS = { work_lost: "work lost since checkpoint", detection: "detection", decision: "decision",
  action: "action", requeue_wait: "requeue wait" };
const GROUPS = ["workload", "category", "node", "policy"];
const BINS = 24;
const STEPS = [60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400].map((sec) => sec * 1000);

/** Failures binned by onset: [{start, end, lost: {cause: seconds}}], at most BINS bins of a round width. */
export function binned(failures) {
  const times = failures.map((f) => parseTime(f.onset)).filter((t) => t !== null);
  if (!times.length) return [];
  const first = Math.min(...times);
  const span = Math.max(...times) - first;
  const width = STEPS.find((w) => span / w < BINS) || STEPS[STEPS.length - 1];
  const origin = Math.floor(first / width) * width;
  const bins = new Map();
  for (const f of failures) {
    const t = parseTime(f.onset);
    if (t === null) continue;
    const start = origin + Math.floor((t - origin) / width) * width;
    const bin = bins.get(start) || { start, end: start + width, lost: Object.fromEntries(CAUSES.map((c) => [c, 0])) };
    for (const c of CAUSES) bin.lost[c] += Number(f[`${c}_seconds`]) || 0;
    bins.set(start, bin);
  }
  return [...bins.values()].sort((a, b) => a.start - b.start);
}

function chart(failures) {
  const bins = binned(failures);
  if (!bins.length) return h("p", { class: "muted", id: "goodput-chart-empty" }, "No failure recorded in this period.");
  const W = 760, H = 220, left = 56, bottom = 28, top = 10;
  const total = (b) => CAUSES.reduce((sum, c) => sum + b.lost[c], 0);
  const most = Math.max(...bins.map(total), 1);
  const t0 = bins[0].start, t1 = bins[bins.length - 1].end;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (W - left - 8);
  const y = (sec) => top + (1 - sec / most) * (H - top - bottom);
  const bars = bins.map((b) => {
    let base = 0;
    return s("g", { class: "bin", "data-start": new Date(b.start).toISOString(), "data-lost": total(b) },
      CAUSES.filter((c) => b.lost[c] > 0).map((c) => {
        const rect = s("rect", { class: `cause cause-${c}`, "data-cause": c, "data-seconds": b.lost[c],
          x: x(b.start) + 1, width: Math.max(x(b.end) - x(b.start) - 2, 1),
          y: y(base + b.lost[c]), height: Math.max(y(base) - y(base + b.lost[c]), 0.5) },
          s("title", {}, `${fmtTime(b.start)}: ${LABELS[c]} ${fmtDur(b.lost[c] * 1000)}`));
        base += b.lost[c];
        return rect;
      }));
  });
  return s("svg", { class: "goodput-chart", id: "goodput-chart", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": "time lost by cause over time" },
    s("line", { class: "axis", x1: left, x2: W - 8, y1: H - bottom, y2: H - bottom }),
    s("line", { class: "axis", x1: left, x2: left, y1: top, y2: H - bottom }),
    s("text", { class: "tick", x: left - 4, y: top + 8, "text-anchor": "end" }, fmtDur(most * 1000)),
    s("text", { class: "tick", x: left - 4, y: H - bottom, "text-anchor": "end" }, "0"),
    s("text", { class: "tick", x: left, y: H - 8 }, fmtTime(t0)),
    s("text", { class: "tick", x: W - 8, y: H - 8, "text-anchor": "end" }, fmtTime(t1)),
    bars);
}

function legend() {
  return h("ul", { class: "plain goodput-legend" }, CAUSES.map((c) =>
    h("li", {}, h("span", { class: `swatch cause-${c}` }), ` ${LABELS[c]}`)));
}

const secs = (v) => (v === null || v === undefined ? "—" : fmtDur(v * 1000));

export async function mount(root, route, { onLive }) {
  const by = GROUPS.includes(route.query.by) ? route.query.by : "workload";
  const body = h("div");
  const picker = h("select", { id: "goodput-by" }, GROUPS.map((g) => h("option", { value: g, selected: g === by }, g)));
  picker.addEventListener("change", () => { location.hash = `#/goodput?by=${picker.value}`; });
  clear(root, h("h1", {}, "Goodput"), h("label", {}, "group by ", picker), body);

  async function load() {
    try {
      const data = await api.get(`/goodput?by=${encodeURIComponent(by)}`);
      const rows = list(data.items);
      clear(body,
        h("h2", {}, "Time lost by cause"), chart(list(data.failures)), legend(),
        h("p", { class: "muted" }, `Without Trainguard: the job's own hang timeout ${secs(data.job_timeout_seconds)}, ` +
          `a manual requeue assumed ${secs(data.manual_delay_seconds)} later; only where the estimate basis is not "none".`),
        h("table", { class: "grid", id: "goodput-table" },
          h("thead", {}, h("tr", {}, [by, "failures", "productive", "lost", ...CAUSES.map((c) => LABELS[c]),
            "goodput", "MTTR", "MTBF", "without Trainguard", "estimate"].map((c) => h("th", {}, c)))),
          h("tbody", {}, rows.length ? rows.map((r) => h("tr", { "data-group": r.group },
            h("td", { class: "mono" }, by === "workload" ? workloadLink(r.group) : r.group || "(none)"),
            h("td", {}, String(r.failures)), h("td", {}, secs(r.productive_seconds)),
            h("td", { class: "lost" }, secs(r.lost_seconds)),
            CAUSES.map((c) => h("td", {}, secs(r[`${c}_seconds`]))),
            h("td", {}, r.goodput === null ? "—" : `${(r.goodput * 100).toFixed(1)} %`),
            h("td", {}, secs(r.mttr_seconds)), h("td", {}, secs(r.mtbf_seconds)),
            h("td", {}, secs(r.baseline_lost_seconds)), h("td", {}, list(r.estimate).join(", "))))
            : emptyRow(14, "No attempt recorded."))));
    } catch (err) {
      clear(body, errorBox(err));
    }
  }
  await load();
  let timer = null;
  const off = onLive((ev) => {
    if (timer === null) timer = setTimeout(() => { timer = null; load(); }, 2000);
  });
  return () => {
    off();
    if (timer !== null) clearTimeout(timer);
  };
}
