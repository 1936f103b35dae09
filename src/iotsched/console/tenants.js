// The tenants (an operator's page): each with its tasks, its quotas and the task count that
// `max_tasks` holds against, as GET /tenants answers; the tenant filter narrows the list.

import { get, h, link, state, swap, taskHash, tenantFilter } from "./common.js";

const QUOTAS = [
  ["max_concurrent_shards", "Concurrent shards"],
  ["max_instances_per_minute", "Instances a minute"],
  ["max_tasks", "Tasks"],
];

function tenantTable(tenants) {
  return h("table", { "aria-label": "Tenants" },
    h("thead", {}, h("tr", {}, ["Tenant", "Tasks", ...QUOTAS.map(([, text]) => `Max ${text.toLowerCase()}`)]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, tenants.map((t) => h("tr", { "data-tenant": t.name },
      h("th", { scope: "row" }, t.name),
      h("td", {}, h("span", { class: "num" }, t.task_count ?? t.tasks.length),
        h("div", { class: "small" }, t.tasks.flatMap((id, n) => [n ? ", " : "", link(taskHash(id), id)]))),
      QUOTAS.map(([key]) => h("td", { class: "num", "data-quota": key, "data-value": t.quotas[key] ?? "" },
        t.quotas[key] ?? "–"))))));
}

export function tenantsPage() {
  const live = h("div", {});
  const filter = tenantFilter(() => this_.refresh());
  const this_ = {
    title: "Tenants",
    nav: "tenants",
    mount: (main) => main.append(h("h2", {}, "Tenants"), filter, live),
    async refresh() {
      const every = await get("/tenants");
      filter.update(every.map((t) => ({ tenant: t.name })));
      // tasks without a tenant have no tenant record: "No tenant" shows none
      const tenants = every.filter((t) => !state.tenant || t.name === state.tenant);
      swap(live, tenants.length
        ? tenantTable(tenants)
        : h("p", { class: "card" }, every.length
          ? "No tenant matches the filter."
          : "No tenants. A task names its tenant; a task file's tenants: section sets their quotas."));
      return false;
    },
  };
  return this_;
}
