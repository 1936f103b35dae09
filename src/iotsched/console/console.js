// iotsched web console: plain ES modules, no build step, nothing fetched but this origin's files
// and the management API named in config.json ({"api": "/api"} under `iotsched local up`).
// This module is the shell: the router and the refresh loop; each page lives in a module of its
// own, and common.js holds what they share.
//
// Pages (hash routes): #/overview (the default), #/tasks, #/tasks/<task>, #/instances/<instance>, #/alerts, #/audit,
// #/tenants.
// Each page mounts once (forms keep their state) and refreshes its live part: every 2 s while
// anything it shows is open (scheduled, queued, planning, running, reducing), else every 15 s.

import { alertsPage } from "./alerts.js";
import { auditPage } from "./audit.js";
import { clearNotice, notify, state, utc } from "./common.js";
import { instancePage } from "./instances.js";
import { overviewPage } from "./overview.js";
import { taskPage, tasksPage } from "./tasks.js";
import { tenantsPage } from "./tenants.js";

const FAST_MS = 2000;
const SLOW_MS = 15000;

// -- the router and the refresh loop ------------------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "tasks" && parts[1]) return taskPage(parts.slice(1).join("/"));
  if (parts[0] === "instances" && parts[1]) return instancePage(parts.slice(1).join("/"));
  if (parts[0] === "alerts") return alertsPage();
  if (parts[0] === "audit") return auditPage();
  if (parts[0] === "tenants") return tenantsPage();
  if (parts[0] === "tasks") return tasksPage();
  return overviewPage();
}

async function show() {
  clearTimeout(state.timer);
  const generation = ++state.generation;
  const page = route();
  state.page = page;
  const main = document.getElementById("view");
  main.replaceChildren();
  document.title = `${page.title} · iotsched`;
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === page.nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  page.mount(main);
  main.focus({ preventScroll: true });
  await tick(page, generation);
}

async function tick(page, generation) {
  if (generation !== state.generation) return;
  let open = false;
  try {
    open = await page.refresh();
    if (document.getElementById("notice").classList.contains("stale")) clearNotice();
    layoutBars();
    document.getElementById("refresh").textContent =
      `updated ${new Date().toLocaleTimeString()}${open ? " · work running, refreshing every 2 s" : ""}`;
  } catch (error) {
    notify(error.status === 404 ? `Not found: ${error.message}` : error.message, { error: true });
    document.getElementById("notice").classList.add("stale");
    open = error.status !== 404; // a passing failure (the API restarting): try again soon
  }
  if (state.local) updateClock();
  if (generation !== state.generation) return;
  state.timer = setTimeout(() => tick(page, generation), open ? FAST_MS : SLOW_MS);
}

/** Bars are placed from data attributes (the CSP allows no inline styles in markup). */
function layoutBars() {
  for (const bar of document.querySelectorAll(".timeline .bar")) {
    bar.style.left = `${bar.dataset.left}%`;
    bar.style.width = `${bar.dataset.size}%`;
  }
}

async function updateClock() {
  try {
    const response = await fetch("/_local/status");
    if (!response.ok) return;
    const status = await response.json();
    document.getElementById("clock").textContent =
      `local runtime · clock ${utc(status.now)}${status.manual_clock ? " (manual)" : ""}`;
  } catch {
    // not under `iotsched local up`: no clock to show
  }
}

async function start() {
  try {
    const response = await fetch("config.json", { cache: "no-store" });
    if (response.ok) {
      const config = await response.json();
      state.api = String(config.api || "/api").replace(/\/$/, "");
      state.local = Boolean(config.local);
    }
  } catch {
    // no config.json: the API is at /api on this origin
  }
  window.addEventListener("hashchange", () => {
    clearNotice();
    show();
  });
  await show();
}

start();
