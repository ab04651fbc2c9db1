// The runtime pause in the console's header: whether recoveries may change the scheduler now (the
// cluster switch and the pause, GET /api/v1/actions), who paused and why; with the write role, a
// control to pause (a reason is required) or resume. Refreshed on start, on every audit record of the
// pause control heard on the live stream, and every 30 s.

import * as api from "./api.js";
import { clear, h } from "./ui.js";

let canWrite = () => false;

function render(el, state) {
  el.hidden = false;
  el.dataset.acting = String(state.acting);
  el.dataset.paused = String(state.paused);
  if (state.paused) {
    el.className = "pausebar paused";
    clear(el,
      h("strong", {}, "Actions paused"),
      ` by ${state.by || "someone"}: ${state.reason}. No recovery changes the scheduler; detection and advice go on.`,
      canWrite() ? h("button", { type: "button", class: "small", id: "resume-actions", onclick: () => change(el, false) },
        "Resume actions") : null);
  } else if (state.breaker) {
    el.className = "pausebar paused";
    clear(el, h("strong", {}, "Breaker open"), `: ${state.breaker}. No recovery changes the scheduler until a person `,
      "resets it (trainguard actions reset-breaker, or POST /api/v1/actions/breaker/reset).");
  } else if (!state.switch) {
    el.className = "pausebar monitor";
    clear(el, "Cluster switch off (--mode monitor): every recommendation is recorded, nothing is acted on.");
  } else {
    el.className = "pausebar acting";
    clear(el, "Actions allowed: policies in Action mode act.",
      canWrite() ? h("button", { type: "button", class: "small", id: "pause-actions", onclick: () => change(el, true) },
        "Pause all actions") : null);
  }
}

async function change(el, pause) {
  try {
    if (pause) {
      const reason = window.prompt("Why pause every recovery action? (recorded in the audit log)");
      if (!reason) return;
      await api.post("/actions/pause", { reason });
    } else {
      await api.post("/actions/resume");
    }
  } catch (err) {
    clear(el, `Cannot change the pause: ${err.message}`);
    return;
  }
  await refresh(el);
}

async function refresh(el) {
  try {
    render(el, await api.get("/actions"));
  } catch (err) {
    el.hidden = false;
    el.className = "pausebar";
    clear(el, `Cannot read whether actions are paused: ${err.message}`);
  }
}

/** Show the pause in ``el``; ``writer()`` says whether the user may change it; ``onLive`` subscribes. */
export function mount(el, writer, onLive) {
  canWrite = writer;
  refresh(el);
  onLive((ev) => {
    const payload = ev.data && ev.data.payload;
    if (payload && (payload.control === "actions-paused" || payload.control === "actions-breaker")) refresh(el);
  });
  setInterval(() => refresh(el), 30000);
}
