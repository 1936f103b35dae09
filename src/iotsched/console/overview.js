// The console's overview, the page an operator opens first: instances per hour by status (last
// 24 hours and last 7 days, stacked bars), duration p50/p95 per task, the tasks failing now,
// missed runs and queue depths, all from GET /overview. Charts are SVG drawn here; every bar
// carries its count in data attributes (for tests) and in a <title> (a tooltip for people).

import {
  allTasks, badge, duration, get, h, instanceHash, link, shownTenant, state, swap, taskHash,
  tenantFilter, utc, words,
} from "./common.js";

// SVG's namespace, as the HTML parser assigns it to an <svg> element.
const SVG = (() => {
  const box = document.createElement("div");
  box.innerHTML = "<svg></svg>";
  return box.firstChild.namespaceURI;
})();
// Stacking order, bottom up: outcomes first, then what is still open.
const ORDER = ["succeeded", "failed", "timed_out", "aborted", "cancelled", "skipped", "running",
  "reducing", "planning", "queued", "scheduled"];
// The week's figures are read again at most this often (a week of instances is the dearest read).
const WEEK_MS = 5 * 60 * 1000;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") el.setAttribute("class", value);
    else if (value !== null && value !== undefined) el.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) {
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  return el;
}

const hourText = (iso) => iso.slice(11, 16);
const dayText = (iso) => iso.slice(5, 10);

/** The query of the page's tenant filter ("-": records with no tenant). */
function tenantQuery() {
  return state.tenant ? `&tenant=${encodeURIComponent(state.tenant)}` : "";
}

/** Stacked bars, one per hour, a segment per status; the y axis from 0 to the busiest hour. */
export function hourChart(data, name) {
  const hours = data.hourly;
  const statuses = ORDER.filter((s) => data.statuses.includes(s))
    .concat(data.statuses.filter((s) => !ORDER.includes(s)));
  const top = Math.max(1, ...hours.map((x) => x.total));
  const width = 960;
  const height = 180;
  const pad = { left: 36, bottom: 22, top: 8 };
  const slot = (width - pad.left) / hours.length;
  const scale = (height - pad.top - pad.bottom) / top;
  const every = hours.length > 48 ? 24 : 3;  // axis labels: every 3 hours, or daily for a week
  const bars = hours.map((hour, n) => {
    let y = height - pad.bottom;
    const x = pad.left + n * slot;
    const label = `${utc(hour.hour).slice(0, 16)} UTC: ${hour.total} instance${hour.total === 1 ? "" : "s"}`;
    const segments = statuses.filter((s) => hour.counts[s]).map((s) => {
      const count = hour.counts[s];
      const size = count * scale;
      y -= size;
      return svg("rect", { class: `seg s-${s}`, x: x + 1, y, width: Math.max(slot - 2, 1), height: size,
        "data-status": s, "data-count": count },
      svg("title", {}, `${label}; ${words(s)}: ${count}`));
    });
    return svg("g", { class: "hour", "data-hour": hour.hour, "data-total": hour.total },
      svg("rect", { class: "slot", x, y: pad.top, width: slot, height: height - pad.top - pad.bottom },
        svg("title", {}, label)),
      segments,
      n % every === 0
        ? svg("text", { class: "tick", x: x + slot / 2, y: height - 6, "text-anchor": "middle" },
          every === 24 ? dayText(hour.hour) : hourText(hour.hour))
        : null);
  });
  const total = hours.reduce((sum, x) => sum + x.total, 0);
  return h("figure", { class: "chart card", "data-chart": name, "data-total": total },
    svgRoot(width, height, `${name}: ${total} instances, at most ${top} in an hour`,
      svg("text", { class: "tick", x: pad.left - 4, y: pad.top + 10, "text-anchor": "end" }, top),
      svg("text", { class: "tick", x: pad.left - 4, y: height - pad.bottom, "text-anchor": "end" }, 0),
      bars),
    h("figcaption", {},
      h("ul", { class: "legend", "aria-label": `${name}: instances by status` },
        statuses.map((s) => h("li", { "data-status": s }, badge(s, `${words(s)}: ${sumOf(hours, s)}`)))),
      data.capped
        ? h("p", { class: "small", role: "note" },
          `Counted from the newest ${data.read} instances: hours before ${utc(data.complete_from)} may be incomplete.`)
        : null));
}

function svgRoot(width, height, label, ...children) {
  return svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label,
    preserveAspectRatio: "none", class: "bars" }, svg("title", {}, label), ...children);
}

function sumOf(hours, status) {
  return hours.reduce((sum, x) => sum + (x.counts[status] || 0), 0);
}

/** Per task: p50 and p95 as two bars on one scale (the slowest p95), with the numbers. */
export function durationTable(rows) {
  if (!rows.length) return h("p", { class: "card" }, "No instance ended in this window.");
  const top = Math.max(...rows.map((r) => r.p95_s), 0.001);
  return h("table", { "aria-label": "Durations per task" },
    h("thead", {}, h("tr", {}, ["Task", "Tenant", "Ended", "p50", "p95", ""]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", { "data-task": r.task_id, "data-count": r.count,
      "data-p50": r.p50_s, "data-p95": r.p95_s },
    h("th", { scope: "row" }, link(taskHash(r.task_id), r.task_id)),
    h("td", {}, r.tenant || "–"),
    h("td", { class: "num" }, r.count),
    h("td", { class: "num" }, duration(r.p50_s)),
    h("td", { class: "num" }, duration(r.p95_s)),
    h("td", { class: "spark" }, svgRoot(200, 16, `${r.task_id}: p50 ${duration(r.p50_s)}, p95 ${duration(r.p95_s)}`,
      svg("rect", { class: "p95", x: 0, y: 0, width: Math.max((r.p95_s / top) * 200, 1), height: 16 },
        svg("title", {}, `p95 ${duration(r.p95_s)}`)),
      svg("rect", { class: "p50", x: 0, y: 4, width: Math.max((r.p50_s / top) * 200, 1), height: 8 },
        svg("title", {}, `p50 ${duration(r.p50_s)}`))))))));
}

function failingTable(rows) {
  if (!rows.length) return h("p", { class: "card", "data-failing": 0 }, "No task is failing.");
  return h("table", { "aria-label": "Tasks failing now", "data-failing": rows.length },
    h("thead", {}, h("tr", {}, ["Task", "Tenant", "Latest outcome", "In a row", "Ended", "Instance"]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((f) => h("tr", { "data-task": f.task_id, "data-failures": f.failures },
      h("th", { scope: "row" }, link(taskHash(f.task_id), f.task_id)),
      h("td", {}, f.tenant || "–"),
      h("td", {}, badge(f.status), f.reason ? h("div", { class: "small" }, f.reason) : null),
      h("td", { class: "num" }, f.failures),
      h("td", {}, utc(f.finished_at)),
      h("td", {}, link(instanceHash(f.instance_id), f.instance_id, { class: "mono" }))))));
}

function missedTable(missed) {
  const head = h("p", { "data-missed": missed.count },
    `${missed.count} missed run${missed.count === 1 ? "" : "s"}`,
    missed.capped ? " (at least: older alerts were not read)" : "");
  if (!missed.alerts.length) return h("div", { class: "card" }, head);
  return h("div", { class: "card" }, head,
    h("table", { "aria-label": "Missed runs" },
      h("thead", {}, h("tr", {}, ["Raised", "Task", "Tenant", "Fire time"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, missed.alerts.map((a) => h("tr", { "data-task": a.task_id },
        h("td", {}, utc(a.raised_at)),
        h("td", {}, link(taskHash(a.task_id), a.task_id)),
        h("td", {}, a.tenant || "–"),
        h("td", { class: "mono" }, a.instance_id.split("@")[1] || a.instance_id))))));
}

function queueTable(queues) {
  if (queues === null) return h("p", { class: "card small" }, "Queue depths are shown to operators.");
  const top = Math.max(1, ...queues.map((q) => q.visible + q.in_flight + q.delayed));
  return h("table", { "aria-label": "Queue depths" },
    h("thead", {}, h("tr", {}, ["Queue", "Waiting", "In flight", "Delayed", ""].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, queues.map((q) => {
      let x = 0;
      const parts = [["visible", "waiting"], ["in_flight", "in flight"], ["delayed", "delayed"]].map(([key, text]) => {
        const size = (q[key] / top) * 200;
        const part = svg("rect", { class: `q-${key}`, x, y: 0, width: size, height: 16 }, svg("title", {}, `${text}: ${q[key]}`));
        x += size;
        return part;
      });
      return h("tr", { "data-queue": q.queue, "data-visible": q.visible, "data-in-flight": q.in_flight,
        "data-delayed": q.delayed },
      h("th", { scope: "row" }, words(q.queue)),
      h("td", { class: "num" }, q.visible),
      h("td", { class: "num" }, q.in_flight),
      h("td", { class: "num" }, q.delayed),
      h("td", { class: "spark" }, svgRoot(200, 16, `${words(q.queue)}: ${q.visible} waiting, ${q.in_flight} in flight, ${q.delayed} delayed`, parts)));
    })));
}

export function overviewPage() {
  const live = h("div", { id: "overview-live" });
  let week = null;
  let weekAt = 0;
  const filter = tenantFilter(() => { week = null; this_.refresh(); });
  const this_ = {
    title: "Overview",
    nav: "overview",
    mount: (main) => main.append(h("h2", {}, "Overview"), filter, live),
    async refresh() {
      const stale = !week || Date.now() - weekAt > WEEK_MS;
      const [tasks, day, fresh] = await Promise.all([
        allTasks(),
        get(`/overview?hours=24${tenantQuery()}`),
        stale ? get(`/overview?hours=168${tenantQuery()}`) : Promise.resolve(week),
      ]);
      if (stale) { week = fresh; weekAt = Date.now(); }
      filter.update(tasks);
      swap(live,
        h("section", { "aria-label": "Last 24 hours" }, h("h3", {}, "Instances per hour, last 24 hours"), hourChart(day, "Last 24 hours")),
        h("section", { "aria-label": "Last 7 days" }, h("h3", {}, "Instances per hour, last 7 days"), hourChart(week, "Last 7 days")),
        h("section", { "aria-label": "Failing now" }, h("h3", {}, "Tasks failing now"), failingTable(day.failing)),
        h("section", { "aria-label": "Durations" }, h("h3", {}, "Duration per task, last 24 hours"), durationTable(day.durations)),
        h("section", { "aria-label": "Missed runs" }, h("h3", {}, "Missed runs, last 24 hours"), missedTable(day.missed_runs)),
        h("section", { "aria-label": "Queues" }, h("h3", {}, "Queue depths"), queueTable(day.queues)),
        h("p", { class: "small" }, `Figures as of ${utc(day.now)}; tasks shown: ${tasks.filter(shownTenant).length}.`));
      return false;
    },
  };
  return this_;
}
