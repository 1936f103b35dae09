// The console's shared parts: the element builder and formatting, the API client, notices,
// the tenant filter and the task list that several pages read.

export const OPEN = new Set(["scheduled", "queued", "planning", "running", "reducing", "pending", "waiting"]);
export const SYMBOL = {
  succeeded: "✓", failed: "✗", timed_out: "⌛", cancelled: "⊘", running: "▶", pending: "…",
  not_rerun: "–", skipped: "↷", planning: "▶", reducing: "Σ", queued: "⋯", scheduled: "◷",
  waiting: "⧗",
};
export const SHARD_STATES = ["succeeded", "running", "pending", "waiting", "failed", "timed_out", "cancelled", "not_rerun"];

// `tenant`: the tasks and alerts filter ("" every tenant the caller sees, "-" tasks without one).
export const state = { api: "/api", local: false, timer: null, page: null, generation: 0, tenant: "" };

// -- small helpers --------------------------------------------------------------------------------

/** An element: h("a", {href: "#/", class: "x", onclick: fn}, "text", child, ...). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** What identifies a focusable element across re-renders (a refresh rebuilds the markup). */
function focusKey(el) {
  if (!el || el === document.body) return null;
  if (el.dataset.key) return `key:${el.dataset.key}`;
  if (el.getAttribute("aria-label")) return `label:${el.getAttribute("aria-label")}`;
  if (el.getAttribute("href")) return `href:${el.getAttribute("href")}`;
  return `text:${el.tagName}:${el.textContent}`;
}

/** Replace a container's content, keeping the keyboard focus on "the same" element. */
export function swap(container, ...children) {
  const active = document.activeElement;
  const key = container.contains(active) ? focusKey(active) : null;
  container.replaceChildren(...children);
  if (key) {
    const again = [...container.querySelectorAll("a, button, input, textarea, [tabindex]")]
      .find((el) => focusKey(el) === key);
    again?.focus({ preventScroll: true });
  }
}

export function words(status) {
  return String(status).replace(/_/g, " ");
}

export function badge(status, label) {
  return h("span", { class: `badge s-${status}` }, label || words(status));
}

function pad(n) {
  return String(n).padStart(2, "0");
}

/** `2026-11-29 12:00:05 UTC` (operators compare with logs, which are UTC). */
export function utc(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} UTC`;
}

/** `2026-11-29 13:00 CET` in the task's timezone. */
export function local(iso, zone) {
  try {
    const parts = new Intl.DateTimeFormat("en-GB", {
      timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
      minute: "2-digit", hourCycle: "h23", timeZoneName: "short",
    }).formatToParts(new Date(iso));
    const p = Object.fromEntries(parts.map((x) => [x.type, x.value]));
    return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute} ${p.timeZoneName}`;
  } catch {
    return utc(iso);
  }
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 10) return `${seconds.toFixed(1)} s`;
  if (seconds < 120) return `${Math.round(seconds)} s`;
  const m = Math.floor(seconds / 60);
  if (m < 120) return `${m} min ${Math.round(seconds - m * 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function link(hash, text, attrs = {}) {
  return h("a", { href: hash, ...attrs }, text);
}

export const taskHash = (id) => `#/tasks/${encodeURIComponent(id)}`;
export const instanceHash = (id) => `#/instances/${encodeURIComponent(id)}`;

// -- the API ----------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.problems = (body && body.problems) || [];
  }
}

export async function call(method, path, body) {
  const init = { method, headers: { Accept: "application/json" } };
  // Every write says JSON, even one without a body: the local runtime refuses writes that do
  // not, as a page of another origin could send them.
  if (method !== "GET" && method !== "HEAD") init.headers["Content-Type"] = "application/json";
  if (body !== undefined) init.body = JSON.stringify(body);
  let response;
  try {
    response = await fetch(state.api + path, init);
  } catch (error) {
    throw new ApiError(0, { message: `the API at ${state.api} is unreachable (${error.message})` });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { message: text.slice(0, 200) };
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const get = (path) => call("GET", path);
export const post = (path, body) => call("POST", path, body);

// -- notices ----------------------------------------------------------------------------------------

export function notify(message, { error = false, href = null, linkText = null } = {}) {
  const box = document.getElementById("notice");
  box.replaceChildren(message, href ? " " : "", href ? link(href, linkText || href) : "");
  box.className = error ? "notice error" : "notice";
  box.setAttribute("role", error ? "alert" : "status");
  box.hidden = false;
}

export function clearNotice() {
  const box = document.getElementById("notice");
  box.hidden = true;
  box.replaceChildren();
}

/** Run an action from a button: disabled while it runs, its error as a notice. */
export async function act(button, action) {
  const key = button.dataset.key;
  button.disabled = true;
  try {
    await action();
  } catch (error) {
    notify(error.message, { error: true });
  } finally {
    button.disabled = false;
    // The page may have been rebuilt meanwhile: keep the keyboard where it was.
    if (key && !button.isConnected) {
      document.querySelector(`[data-key="${CSS.escape(key)}"]`)?.focus({ preventScroll: true });
    }
  }
}


export function fact(term, value, wide = false) {
  return h("div", { class: wide ? "wide" : null }, h("dt", {}, term), h("dd", {}, value));
}

// -- tasks and tenants --------------------------------------------------------------------------------

// GET /tasks answers a page at a time, in id order: read on while pages come back full.
export async function allTasks() {
  const limit = 100;
  const tasks = [];
  for (;;) {
    const after = tasks.length ? `&after=${encodeURIComponent(tasks[tasks.length - 1].id)}` : "";
    const page = await get(`/tasks?limit=${limit}${after}`);
    tasks.push(...page);
    if (page.length < limit) return tasks;
  }
}

/** The tenant filter: a select of the tenants `records` name, kept across refreshes. */
export function tenantFilter(onchange) {
  const select = h("select", { id: "tenant-filter", "data-key": "tenant-filter",
    onchange: () => { state.tenant = select.value; onchange(); } });
  const bar = h("p", { class: "filter" }, h("label", { for: "tenant-filter" }, "Tenant "), select);
  bar.update = (records) => {
    const names = [...new Set(records.map((r) => r.tenant).filter(Boolean))].sort();
    if (state.tenant && state.tenant !== "-" && !names.includes(state.tenant)) names.push(state.tenant);
    const options = [["", "All tenants"], ...names.map((n) => [n, n]), ["-", "No tenant"]];
    const focused = document.activeElement === select;
    select.replaceChildren(...options.map(([value, text]) =>
      h("option", { value, selected: value === state.tenant }, text)));
    select.value = state.tenant;
    if (focused) select.focus({ preventScroll: true });
  };
  return bar;
}

export function shownTenant(record) {
  return !state.tenant || (record.tenant || "-") === state.tenant;
}
