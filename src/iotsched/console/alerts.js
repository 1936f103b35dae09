// The recent alerts, tenant filter respected.

import { badge, get, h, instanceHash, link, shownTenant, swap, taskHash, tenantFilter, utc, words } from "./common.js";

export function alertsPage() {
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
}
