// The console's shell: hash routing between the pages, the token dialog, who the user is (read or
// write role) and the one live-event stream every page listens to.

import * as api from "./api.js";
import { clear, errorBox, h } from "./ui.js";
import * as overview from "./pages/overview.js";
import * as workloads from "./pages/workloads.js";
import * as workload from "./pages/workload.js";
import * as audit from "./pages/audit.js";
import * as nodes from "./pages/nodes.js";
import * as policies from "./pages/policies.js";
import * as backtest from "./pages/backtest.js";

const PAGES = { overview, workloads, workload, audit, nodes, policies, backtest };

/** What every page gets: who the user is, and a way to hear live events. */
export const session = {
  user: "",
  role: "", // "read" | "write" | "" (not known yet)
  auth: "",
  canWrite() {
    return this.role === "write";
  },
};

const listeners = new Set();
let current = null; // { name, unmount }
let stopEvents = null;

function banner(text) {
  const el = document.getElementById("banner");
  if (!text) {
    el.hidden = true;
    clear(el);
    return;
  }
  el.hidden = false;
  clear(el, text);
}

function setLive(state) {
  const el = document.getElementById("live");
  el.className = `live ${state}`;
  el.textContent = { live: "live", retrying: "reconnecting…", denied: "no access", off: "offline" }[state] || state;
  el.dataset.state = state;
}

/** Subscribe to live events ({event, data}); returns the unsubscribe function. */
export function onLive(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function startEvents() {
  if (stopEvents) stopEvents();
  stopEvents = api.follow(
    (ev) => {
      for (const fn of [...listeners]) {
        try {
          fn(ev);
        } catch (err) {
          console.error("live listener failed", err);
        }
      }
    },
    (state) => setLive(state),
  );
}

async function whoami() {
  try {
    const me = await api.get("/whoami");
    Object.assign(session, { user: me.user, role: me.role, auth: me.auth });
    document.getElementById("who").textContent = `${me.user} · ${me.role}`;
    document.body.dataset.role = me.role;
    banner("");
    return true;
  } catch (err) {
    session.role = "";
    document.body.dataset.role = "";
    document.getElementById("who").textContent = "";
    if (err.status === 401) {
      banner(api.token() ? "The token was refused (401): enter another one." : "This server needs an access token.");
      openTokenDialog();
      return false;
    }
    banner(`Cannot reach the API: ${err.message}`);
    return true;
  }
}

function openTokenDialog() {
  const dialog = document.getElementById("token-dialog");
  document.getElementById("token-input").value = "";
  if (!dialog.open) dialog.showModal();
}

function parseRoute() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, queryText] = hash.split("?", 2);
  const parts = path.split("/").filter(Boolean);
  const query = Object.fromEntries(new URLSearchParams(queryText || ""));
  const name = parts[0] || "overview";
  if (name === "workload") return { name, arg: decodeURIComponent(parts.slice(1).join("/")), query };
  return { name: PAGES[name] ? name : "overview", arg: "", query };
}

async function render() {
  const route = parseRoute();
  if (current && current.unmount) current.unmount();
  current = null;
  for (const a of document.querySelectorAll("#nav a")) {
    const page = route.name === "workload" ? "workloads" : route.name;
    a.classList.toggle("active", a.dataset.page === page);
  }
  const main = document.getElementById("main");
  const root = h("section", { class: "page", "data-page": route.name });
  clear(main, root);
  try {
    const unmount = await PAGES[route.name].mount(root, route, { session, onLive });
    current = { name: route.name, unmount };
  } catch (err) {
    clear(root, errorBox(err));
  }
}

/** Navigate by changing the hash (the router re-renders). */
export function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

async function start() {
  const dialog = document.getElementById("token-dialog");
  document.getElementById("token-button").addEventListener("click", openTokenDialog);
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue === "save") api.setToken(document.getElementById("token-input").value.trim());
    else if (dialog.returnValue === "clear") api.setToken("");
    else return;
    if (await whoami()) {
      startEvents();
      render();
    }
  });
  window.addEventListener("hashchange", render);
  setLive("off");
  if (await whoami()) {
    startEvents();
    render();
  }
}

start();
