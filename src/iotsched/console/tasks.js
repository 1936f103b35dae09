// The tasks list and a task's page: its facts, timeline, instances, versions and changes.

import { auditTable, versionTable } from "./audit.js";
import {
  OPEN, allTasks, badge, duration, fact, get, h, instanceHash, link, local, shownTenant, swap, taskHash,
  tenantFilter, utc, words,
} from "./common.js";
import { editForm, pauseButton, runForm } from "./forms.js";

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


export function tasksPage() {
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
            pauseButton(task, refresh, openForm),
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
}

export function taskPage(taskId) {
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
      const openForm = async (form) => {
        forms.replaceChildren(await form);
        forms.querySelector("input, textarea")?.focus();
      };
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
          pauseButton(task, refresh, openForm),
          h("button", { type: "button", onclick: () => openForm(runForm(task, refresh)) }, "Run now…"),
          h("button", { type: "button", onclick: () => openForm(editForm(taskId, refresh)) }, "Edit…"))));
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
}

function instanceTable(instances) {
  if (!instances.length) return h("p", { class: "card" }, "No instances yet.");
  return h("table", { "aria-label": "Instances" },
    h("thead", {}, h("tr", {}, ["Instance", "Status", "Trigger", "Priority", "Version", "Business date", "Started", "Duration", "Shards"]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, instances.map((i) => h("tr", { "data-instance": i.instance_id },
      h("th", { scope: "row" }, link(instanceHash(i.instance_id), i.instance_id, { class: "mono" })),
      h("td", {}, badge(i.status), i.reason ? h("div", { class: "small" }, i.reason) : null),
      h("td", {}, words(i.trigger_kind)),
      h("td", { "data-priority": i.priority }, i.priority),
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
