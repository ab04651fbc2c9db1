// The console's shell: hash routing between the pages, who is logged in (read or write role, with a
// logout button when the server asks for credentials) and the one live-event stream every page
// listens to. The login itself is the server's script-free form at / (see http/login.py).

import * as api from "./api.js";
import { clear, errorBox, h } from "./ui.js";
import * as overview from "./pages/overview.js";
import * as workloads from "./pages/workloads.js";
import * as workload from "./pages/workload.js";
import * as audit from "./pages/audit.js";
import * as nodes from "./pages/nodes.js";
import * as policies from "./pages/policies.js";
import * as scorecard from "./pages/scorecard.js";
import * as goodput from "./pages/goodput.js";
import * as backtest from "./pages/backtest.js";
import * as pausebar from "./pause.js";

const PAGES = { overview, workloads, workload, audit, nodes, policies, scorecard, goodput, backtest };

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
    // no credentials asked (loopback without a token file): nobody to log out
    document.getElementById("logout").hidden = me.auth === "none";
    banner("");
    return true;
  } catch (err) {
    session.role = "";
    document.body.dataset.role = "";
    document.getElementById("who").textContent = "";
    banner(`Cannot reach the API: ${err.message}`);
    return true;
  }
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
  document.getElementById("logout").addEventListener("click", () => {
    api.logout().catch((err) => banner(`Cannot log out: ${err.message}`));
  });
  window.addEventListener("hashchange", render);
  setLive("off");
  if (await whoami()) {
    startEvents();
    pausebar.mount(document.getElementById("pausebar"), () => session.canWrite(), onLive);
    render();
  }
}

start();
