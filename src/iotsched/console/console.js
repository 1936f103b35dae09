// iotsched web console: plain ES module, no build step, nothing fetched but this origin's files
// and the management API named in config.json ({"api": "/api"} under `iotsched local up`).
//
// Pages (hash routes): #/overview (the default), #/tasks, #/tasks/<task>, #/instances/<instance>, #/alerts, #/audit.
// Each page mounts once (forms keep their state) and refreshes its live part: every 2 s while
// anything it shows is open (scheduled, queued, planning, running, reducing), else every 15 s.

import { auditTable, versionTable } from "./audit.js";
import { attemptLog } from "./logs.js";
import { overviewPage } from "./overview.js";

const OPEN = new Set(["scheduled", "queued", "planning", "running", "reducing", "pending", "waiting"]);
const FAST_MS = 2000;
const SLOW_MS = 15000;
const SYMBOL = {
  succeeded: "✓", failed: "✗", timed_out: "⌛", cancelled: "⊘", running: "▶", pending: "…",
  not_rerun: "–", skipped: "↷", planning: "▶", reducing: "Σ", queued: "⋯", scheduled: "◷",
  waiting: "⧗",
};
const SHARD_STATES = ["succeeded", "running", "pending", "waiting", "failed", "timed_out", "cancelled", "not_rerun"];

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
function local(iso, zone) {
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

async function call(method, path, body) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
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

function clearNotice() {
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

// -- pages ------------------------------------------------------------------------------------------

function pauseButton(task, after) {
  const verb = task.paused ? "Resume" : "Pause";
  const button = h("button", { type: "button", "aria-label": `${verb} ${task.id}`, "data-key": `pause:${task.id}` }, verb);
  button.addEventListener("click", () =>
    act(button, async () => {
      const changed = await post(`/tasks/${encodeURIComponent(task.id)}/${verb.toLowerCase()}`);
      notify(`${task.id} ${changed.paused ? "paused" : "resumed"}.`);
      await after();
    }),
  );
  return button;
}

/** The run-now form: a business date (empty: the task's own rule for the current minute). */
function runForm(task, after) {
  const id = `run-date-${task.id}`;
  const input = h("input", { type: "date", id, name: "business_date", "aria-describedby": `${id}-hint` });
  const error = h("p", { class: "field-error", id: `${id}-error`, hidden: true });
  const form = h(
    "form",
    { class: "panel card", "aria-label": `Run ${task.id} now` },
    h("h3", {}, `Run ${task.id} now`),
    h("div", {},
      h("label", { for: id }, "Business date"),
      input,
      h("p", { class: "hint", id: `${id}-hint` },
        "Leave empty for the task's own rule. The run takes the current minute; a second run in the same minute finds the first."),
      error),
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary" }, "Run now"),
      h("button", { type: "button", onclick: () => form.remove() }, "Close")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const button = form.querySelector("button[type=submit]");
    act(button, async () => {
      error.hidden = true;
      input.removeAttribute("aria-invalid");
      const body = input.value ? { business_date: input.value } : {};
      try {
        const result = await post(`/tasks/${encodeURIComponent(task.id)}/runs`, body);
        const what = {
          claimed: "Run started:", queued: "Run queued behind the running instance:",
          skipped: "Run skipped by the blocking policy:", failed: "Run failed to start:",
          exists: "An instance of this minute already exists:",
        }[result.outcome] || `${result.outcome}:`;
        notify(what, { href: instanceHash(result.instance.instance_id), linkText: result.instance.instance_id });
        form.remove();
        await after();
      } catch (failure) {
        if (failure.status === 400) {
          error.textContent = failure.problems.map((p) => p.message).join("; ") || failure.message;
          error.hidden = false;
          input.setAttribute("aria-invalid", "true");
          input.setAttribute("aria-errormessage", error.id);
          input.focus();
        } else throw failure;
      }
    });
  });
  return form;
}

/** The edit form: params (JSON), description and shard timeout, with errors beside each field. */
async function editForm(taskId, after) {
  const detail = await get(`/tasks/${encodeURIComponent(taskId)}`);
  const definition = detail.definition;
  const fields = {
    params: h("textarea", { id: "edit-params", name: "params", rows: 8, spellcheck: "false" },
      JSON.stringify(definition.params || {}, null, 2)),
    description: h("input", { id: "edit-description", name: "description", value: definition.description || "" }),
    timeout_s: h("input", { id: "edit-timeout_s", name: "timeout_s", type: "number", value: definition.timeout_s }),
  };
  const errors = {};
  const row = (name, label, hint) => {
    errors[name] = h("p", { class: "field-error", id: `edit-${name}-error`, hidden: true });
    return h("div", {}, h("label", { for: `edit-${name}` }, label), fields[name],
      hint ? h("p", { class: "hint" }, hint) : null, errors[name]);
  };
  const general = h("div", { class: "field-error", role: "alert", hidden: true });
  const form = h("form", { class: "panel card", "aria-label": `Edit ${taskId}`, novalidate: true },
    h("h3", {}, `Edit ${taskId}`),
    general,
    row("params", "Params (JSON object)", "Handed to the handler of every shard."),
    row("description", "Description"),
    row("timeout_s", "Shard timeout (seconds, 1 to 900)"),
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary" }, "Save"),
      h("button", { type: "button", onclick: () => form.remove() }, "Cancel")));

  const show = (name, message) => {
    const target = errors[name] || general;
    target.textContent = target.hidden || !target.textContent ? message : `${target.textContent}; ${message}`;
    target.hidden = false;
    if (fields[name]) {
      fields[name].setAttribute("aria-invalid", "true");
      fields[name].setAttribute("aria-errormessage", target.id);
    }
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    for (const name of Object.keys(fields)) {
      errors[name].hidden = true;
      errors[name].textContent = "";
      fields[name].removeAttribute("aria-invalid");
    }
    general.hidden = true;
    general.textContent = "";
    let params;
    try {
      params = JSON.parse(fields.params.value || "{}");
      if (params === null || typeof params !== "object" || Array.isArray(params)) {
        throw new Error("must be a JSON object, e.g. {\"window\": 30}");
      }
    } catch (problem) {
      show("params", `not valid: ${problem.message}`);
      fields.params.focus();
      return;
    }
    const timeout = fields.timeout_s.value.trim();
    const body = {
      ...definition,
      params,
      description: fields.description.value,
      timeout_s: /^-?\d+$/.test(timeout) ? Number(timeout) : timeout,
    };
    const button = form.querySelector("button[type=submit]");
    act(button, async () => {
      try {
        const result = await call("PUT", `/tasks/${encodeURIComponent(taskId)}`, body);
        notify(`${taskId}: ${result.change} (version ${result.task.version}).`);
        form.remove();
        await after();
      } catch (failure) {
        if (failure.status !== 400) throw failure;
        for (const problem of failure.problems) {
          // `task 'x': params.window` or `body.timeout_s`: the first field name after the task.
          const where = problem.field.replace(/^task '[^']*': /, "").replace(/^body\./, "");
          const name = Object.keys(fields).find((f) => where === f || where.startsWith(`${f}.`));
          show(name, name ? problem.message : `${problem.field}: ${problem.message}`);
        }
        if (!failure.problems.length) show(null, failure.message);
        const first = Object.keys(fields).find((f) => fields[f].getAttribute("aria-invalid"));
        (first ? fields[first] : general).focus?.();
      }
    });
  });
  return form;
}

function lastOutcome(task) {
  const last = task.last_instance;
  if (!last) return h("span", { class: "small" }, "never ran");
  return h("span", {}, badge(last.status), " ",
    link(instanceHash(last.instance_id), last.business_date, { "aria-label": `Last instance ${last.instance_id}` }),
    h("span", { class: "small" }, ` ${words(last.trigger_kind)}`));
}

function nextFires(task, count) {
  if (!task.next_fires.length) {
    return h("span", { class: "small" }, task.paused ? "paused" : task.trigger.after ? "after its parents" : "none");
  }
  return h("ul", { class: "fires" }, task.next_fires.slice(0, count).map((f) =>
    h("li", { title: utc(f) }, h("time", { datetime: f }, local(f, task.timezone)))));
}

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

const pages = {
  tasks() {
    const live = h("div", { id: "tasks-live" });
    const forms = h("div", { id: "task-forms" });
    const filter = tenantFilter(() => this_.refresh());
    const this_ = {
      title: "Tasks",
      nav: "tasks",
      mount: (main) => main.append(h("h2", {}, "Tasks"), filter, forms, live),
      async refresh() {
        const every = await allTasks();
        filter.update(every);
        const tasks = every.filter(shownTenant);
        const refresh = () => this.refresh();
        const openForm = async (form) => {
          forms.replaceChildren(await form);
          forms.querySelector("input, textarea")?.focus();
        };
        const rows = tasks.map((task) =>
          h("tr", { "data-task": task.id },
            h("th", { scope: "row" }, link(taskHash(task.id), task.id)),
            h("td", {}, task.tenant || "–"),
            h("td", {}, task.trigger_text),
            h("td", {}, task.timezone),
            h("td", {}, nextFires(task, 3)),
            h("td", {}, lastOutcome(task)),
            h("td", {}, task.paused ? badge("paused") : task.enabled ? badge("active") : badge("none", "disabled"),
              task.paused && task.pause_note ? h("div", { class: "small pause-note" }, task.pause_note) : null),
            h("td", {}, h("div", { class: "actions" },
              pauseButton(task, refresh),
              h("button", { type: "button", "aria-label": `Run ${task.id} now…`,
                onclick: () => openForm(runForm(task, refresh)) }, "Run now…"),
              h("button", { type: "button", "aria-label": `Edit ${task.id}…`,
                onclick: () => openForm(editForm(task.id, refresh)) }, "Edit…")))));
        swap(live, tasks.length
          ? h("table", { "aria-label": "Tasks" },
            h("thead", {}, h("tr", {}, ["Task", "Tenant", "Trigger", "Timezone", "Next fires", "Last outcome", "State", "Actions"]
              .map((c) => h("th", { scope: "col" }, c)))),
            h("tbody", {}, rows))
          : every.length
            ? h("p", { class: "card" }, "No task of this tenant.")
            : h("p", { class: "card" }, "No tasks yet. Apply a task file: ", h("code", {}, "iotsched tasks apply tasks.yaml")));
        return tasks.some((t) => t.last_instance && OPEN.has(t.last_instance.status));
      },
    };
    return this_;
  },

  task(taskId) {
    const head = h("div", {});
    const live = h("div", {});
    const forms = h("div", {});
    return {
      title: `Task ${taskId}`,
      nav: "tasks",
      mount: (main) => main.append(
        h("p", { class: "crumbs" }, link("#/tasks", "Tasks"), " › ", taskId),
        h("h2", {}, taskId), head, forms, live),
      async refresh() {
        const [task, instances, versions, records] = await Promise.all([
          get(`/tasks/${encodeURIComponent(taskId)}`),
          get(`/instances?task_id=${encodeURIComponent(taskId)}&limit=50`),
          get(`/tasks/${encodeURIComponent(taskId)}/versions`),
          get(`/audit?task=${encodeURIComponent(taskId)}&limit=50`),
        ]);
        const refresh = () => this.refresh();
        swap(head, h("section", { class: "card", "aria-label": "Task" },
          h("dl", { class: "facts" },
            fact("Tenant", task.tenant || "–"),
            fact("Trigger", task.trigger_text),
            fact("Timezone", task.timezone),
            fact("State", task.paused ? badge("paused") : badge("active")),
            task.paused && task.pause_note ? fact("Pause note", task.pause_note) : null,
            fact("Handler", task.handler),
            fact("Sharding", task.sharding),
            fact("Version", task.version),
            fact("Next fires", nextFires(task, 5), true)),
          h("div", { class: "actions", style: null },
            pauseButton(task, refresh),
            h("button", { type: "button", onclick: async () => forms.replaceChildren(runForm(task, refresh)) }, "Run now…"),
            h("button", { type: "button", onclick: async () => forms.replaceChildren(await editForm(taskId, refresh)) }, "Edit…"))));
        swap(live,
          h("h3", {}, "Timeline"),
          timeline(instances.slice(0, 20)),
          h("h3", {}, "Instances"),
          instanceTable(instances),
          h("h3", {}, "Versions"),
          versionTable(taskId, versions, refresh),
          h("h3", {}, "Changes (last day)"),
          auditTable(records));
        return instances.some((i) => OPEN.has(i.status));
      },
    };
  },

  instance(instanceId) {
    const head = h("div", {});
    const live = h("div", {});
    const detail = h("section", { "aria-label": "Selected shard", id: "shard-detail" });
    let selected = null;
    let shards = [];
    let instance = null;
    const showDetail = () => {
      const shard = shards.find((s) => s.index === selected);
      swap(detail, shard ? shardDetail(instance, shard) : h("p", { class: "small" },
        "Select a shard for its bounds, attempts, error and keys."));
    };
    return {
      title: `Instance ${instanceId}`,
      nav: "tasks",
      mount: (main) => main.append(
        h("p", { class: "crumbs" }, link("#/tasks", "Tasks"), " › ",
          link(taskHash(instanceId.split("@")[0]), instanceId.split("@")[0]), " › ", instanceId),
        h("h2", {}, instanceId), head, live, detail),
      async refresh() {
        const pages_ = [];
        let start = 0;
        do {
          const page = await get(`/instances/${encodeURIComponent(instanceId)}/shards?start=${start}`);
          pages_.push(page);
          start = page.next_start;
        } while (start !== null && start !== undefined);
        instance = pages_[0].instance;
        shards = pages_.flatMap((p) => p.shards);
        const counts = {};
        for (const s of shards) counts[s.status] = (counts[s.status] || 0) + 1;
        const ended = !OPEN.has(instance.status);
        const rerun = (body, label, nothing = false) => {
          const button = h("button", { type: "button", disabled: !ended || nothing,
            title: ended ? (nothing ? "no shard failed" : null) : "the instance is still open" }, label);
          button.addEventListener("click", () => act(button, async () => {
            const started = await post(`/instances/${encodeURIComponent(instanceId)}/rerun`, body);
            notify(`Run ${started.run} started:`, { href: instanceHash(started.instance_id), linkText: started.instance_id });
            location.hash = instanceHash(started.instance_id);
          }));
          return button;
        };
        const cancel = h("button", { type: "button", class: "danger", disabled: ended }, "Cancel instance");
        cancel.addEventListener("click", () => act(cancel, async () => {
          if (!window.confirm(`Cancel ${instanceId}? Shards not started never run.`)) return;
          await post(`/instances/${encodeURIComponent(instanceId)}/cancel`, { reason: "cancelled from the console" });
          notify(`${instanceId} cancelled.`);
          await this.refresh();
        }));
        swap(head, h("section", { class: "card", "aria-label": "Instance" },
          h("dl", { class: "facts" },
            fact("Status", badge(instance.status)),
            fact("Trigger", words(instance.trigger_kind)),
            fact("Business date", instance.business_date),
            fact("Slot", utc(instance.slot)),
            fact("Started", utc(instance.created_at)),
            fact("Duration", instance.duration_s === null ? `running ${duration((Date.now() - Date.parse(instance.created_at)) / 1000)}` : duration(instance.duration_s)),
            fact("Shards", `${instance.shards - instance.remaining} of ${instance.shards} done, ${instance.failed_shards} failed`),
            fact("Run", instance.rerun_of ? h("span", {}, `${instance.run} of `, link(instanceHash(instance.rerun_of), instance.rerun_of)) : instance.run),
            instance.reason ? fact("Reason", instance.reason) : null),
          h("div", { class: "actions" },
            rerun({ failed_only: true }, "Rerun failed shards", instance.failed_shards === 0),
            rerun(undefined, "Rerun all shards"),
            cancel)));
        swap(live,
          h("h3", {}, `Shards (${shards.length})`),
          h("ul", { class: "legend", "aria-label": "Shard counts by status" },
            SHARD_STATES.filter((s) => counts[s]).map((s) =>
              h("li", {}, badge(s, `${SYMBOL[s] || ""} ${words(s)}: ${counts[s]}`)))),
          h("ul", { class: "grid", "aria-label": "Shard grid" }, shards.map((s) => {
            const label = `Shard ${s.index}: ${words(s.status)}${s.attempt > 1 ? `, ${s.attempt} attempts` : ""}`;
            const where = Object.entries(s.bounds || {})
              .filter(([k]) => !["key_space", "first_id", "end_id"].includes(k))
              .map(([k, v]) => `${k} ${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ");
            return h("li", {}, h("button", {
              type: "button", class: `badge s-${s.status}`, "aria-label": label,
              title: where ? `${label} · ${where}` : label,
              "aria-pressed": selected === s.index ? "true" : "false", "data-shard": s.index,
              "data-key": `shard:${s.index}`,
              onclick: () => {
                selected = s.index;
                for (const b of live.querySelectorAll(".grid button")) {
                  b.setAttribute("aria-pressed", b.dataset.shard === String(s.index) ? "true" : "false");
                }
                showDetail();
                detail.querySelector("h3")?.focus();
              },
            }, h("span", { class: "idx" }, s.index), h("span", { class: "sym", "aria-hidden": "true" }, SYMBOL[s.status] || "")));
          })));
        showDetail();
        return !ended || shards.some((s) => OPEN.has(s.status));
      },
    };
  },

  audit() {
    const live = h("div", {});
    return {
      title: "Audit",
      nav: "audit",
      mount: (main) => main.append(h("h2", {}, "Who changed what (last day)"), live),
      async refresh() {
        swap(live, auditTable(await get("/audit?limit=500")));
        return false;
      },
    };
  },

  alerts() {
    const live = h("div", {});
    const filter = tenantFilter(() => this_.refresh());
    const this_ = {
      title: "Alerts",
      nav: "alerts",
      mount: (main) => main.append(h("h2", {}, "Alerts"), filter, live),
      async refresh() {
        const every = await get("/alerts?limit=100");
        filter.update(every);
        const alerts = every.filter(shownTenant);
        swap(live, alerts.length
          ? h("table", { "aria-label": "Recent alerts" },
            h("thead", {}, h("tr", {}, ["Raised", "Severity", "Type", "Tenant", "Task", "Instance", "Reason"]
              .map((c) => h("th", { scope: "col" }, c)))),
            h("tbody", {}, alerts.map((a) => h("tr", {},
              h("td", {}, utc(a.raised_at)),
              h("td", {}, badge(a.severity)),
              h("td", {}, words(a.type)),
              h("td", {}, a.tenant || "–"),
              h("td", {}, link(taskHash(a.task_id), a.task_id)),
              h("td", {}, link(instanceHash(a.instance_id), a.instance_id, { class: "mono" })),
              h("td", {}, a.reason || "–",
                a.failed_shards && a.failed_shards.length
                  ? h("div", { class: "small" }, `failed shards: ${a.failed_shards.map((s) => s.index ?? s.shard).join(", ")}`)
                  : null)))))
          : h("p", { class: "card" }, every.length ? "No alert of this tenant." : "No alerts. Failed and timed-out instances, dead-lettered shards and queue overflows appear here."));
        return false;
      },
    };
    return this_;
  },
};

function fact(term, value, wide = false) {
  return h("div", { class: wide ? "wide" : null }, h("dt", {}, term), h("dd", {}, value));
}

function instanceTable(instances) {
  if (!instances.length) return h("p", { class: "card" }, "No instances yet.");
  return h("table", { "aria-label": "Instances" },
    h("thead", {}, h("tr", {}, ["Instance", "Status", "Trigger", "Version", "Business date", "Started", "Duration", "Shards"]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, instances.map((i) => h("tr", { "data-instance": i.instance_id },
      h("th", { scope: "row" }, link(instanceHash(i.instance_id), i.instance_id, { class: "mono" })),
      h("td", {}, badge(i.status), i.reason ? h("div", { class: "small" }, i.reason) : null),
      h("td", {}, words(i.trigger_kind)),
      h("td", { class: "num" }, `v${i.task_version}`),
      h("td", {}, i.business_date),
      h("td", {}, utc(i.created_at)),
      h("td", { class: "num" }, duration(i.duration_s)),
      h("td", { class: "num" }, `${i.shards - i.remaining}/${i.shards}`,
        i.failed_shards ? h("div", { class: "small" }, `${i.failed_shards} failed`) : null)))));
}

/** One bar per instance, from its creation to its end (or now), on a shared time axis. */
function timeline(instances) {
  if (!instances.length) return h("p", { class: "small" }, "Nothing ran yet.");
  const now = Date.now();
  const spans = instances.map((i) => [Date.parse(i.created_at), i.finished_at ? Date.parse(i.finished_at) : now]);
  const from = Math.min(...spans.map((s) => s[0]));
  const to = Math.max(...spans.map((s) => s[1]), from + 1000);
  const width = to - from;
  return h("figure", { class: "timeline card", "aria-label": `Timeline from ${utc(new Date(from).toISOString())} to ${utc(new Date(to).toISOString())}` },
    instances.map((i, n) => {
      const [a, b] = spans[n];
      const left = ((a - from) / width) * 100;
      const size = Math.max(((b - a) / width) * 100, 0.4);
      const label = `${i.instance_id}: ${words(i.status)}, ${duration((b - a) / 1000)}`;
      return h("div", { class: "row" },
        link(instanceHash(i.instance_id), i.instance_id.split("@")[1] || i.instance_id, { class: "mono small", title: i.instance_id }),
        h("div", { class: "lane" }, h("span", { class: `bar s-${i.status}`, title: label, role: "img", "aria-label": label,
          style: null, "data-left": left.toFixed(2), "data-size": size.toFixed(2) })));
    }),
    h("figcaption", { class: "axis small" }, h("span", {}, utc(new Date(from).toISOString())), h("span", {}, utc(new Date(to).toISOString()))));
}

function shardDetail(instance, shard) {
  const rerunShard = h("button", { type: "button", disabled: OPEN.has(instance.status) || shard.status === "not_rerun" },
    `Rerun shard ${shard.index}`);
  rerunShard.addEventListener("click", () => act(rerunShard, async () => {
    const started = await post(`/instances/${encodeURIComponent(instance.instance_id)}/rerun`, { shard: shard.index });
    notify(`Shard ${shard.index} runs again in run ${started.run}:`, { href: instanceHash(started.instance_id), linkText: started.instance_id });
    location.hash = instanceHash(started.instance_id);
  }));
  const keys = shard.keys_written || [];
  const keyCount = Math.max(shard.keys_count ?? 0, keys.length);  // each attempt lists its first 20
  return h("div", { class: "card" },
    h("h3", { tabindex: "-1" }, `Shard ${shard.index} `, badge(shard.status)),
    h("dl", { class: "facts" },
      fact("Bounds", Object.keys(shard.bounds || {}).length
        ? h("pre", { class: "mono" }, Object.entries(shard.bounds).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join("\n"))
        : "the whole key space"),
      fact("Attempts", shard.attempt),
      fact("Worker", shard.owner || "–"),
      fact("Error", shard.error || "–")),
    h("h3", {}, "Attempts"),
    shard.attempts.length
      ? h("table", { "aria-label": `Attempts of shard ${shard.index}` },
        h("thead", {}, h("tr", {}, ["#", "Worker", "Started", "Duration", "Outcome", "Error"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, shard.attempts.map((a) => h("tr", {},
          h("td", { class: "num" }, a.number),
          h("td", { class: "mono" }, a.worker),
          h("td", {}, utc(a.started_at)),
          h("td", { class: "num" }, a.duration_ms === null || a.duration_ms === undefined ? "–" : duration(a.duration_ms / 1000)),
          h("td", {}, a.outcome ? badge(a.outcome) : badge("running")),
          h("td", {}, a.error ? h("pre", { class: "mono" }, a.error) : "–")))))
      : h("p", { class: "small" }, "No attempt yet."),
    h("h3", {}, `Keys written (${keyCount})`),
    keys.length
      ? h("ul", { class: "mono", "aria-label": "Keys written" }, keys.slice(0, 50).map((k) => h("li", {}, k)),
        keyCount > Math.min(keys.length, 50) ? h("li", { class: "small" }, `and ${keyCount - Math.min(keys.length, 50)} more`) : null)
      : h("p", { class: "small" }, "None."),
    shard.result !== undefined ? h("div", {}, h("h3", {}, "Reduce result"), h("pre", { class: "mono" }, JSON.stringify(shard.result, null, 2))) : null,
    attemptLog(instance.instance_id, shard),
    h("div", { class: "actions" }, rerunShard));
}

// -- the router and the refresh loop ------------------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "tasks" && parts[1]) return pages.task(parts.slice(1).join("/"));
  if (parts[0] === "instances" && parts[1]) return pages.instance(parts.slice(1).join("/"));
  if (parts[0] === "alerts") return pages.alerts();
  if (parts[0] === "audit") return pages.audit();
  if (parts[0] === "tasks") return pages.tasks();
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
