// The console's audit views: a task's versions (with a rollback per earlier version) and the
// audit records (who changed what, when, and the difference).

import { act, get, h, instanceHash, link, notify, post, swap, taskHash, utc } from "./common.js";

const changes = (diff) => Object.entries(diff || {})
  .map(([field, [before, after]]) => `${field}: ${JSON.stringify(before)} → ${JSON.stringify(after)}`);

export function auditTable(records) {
  if (!records.length) return h("p", { class: "card" }, "No changes in this window.");
  return h("table", { "aria-label": "Audit records" },
    h("thead", {}, h("tr", {}, ["At", "By", "Verb", "Subject", "State", "Instances", "Changed"]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, records.map((r) => h("tr", { "data-audit": r.verb },
      h("td", {}, utc(r.at)),
      h("td", { class: "mono" }, r.actor),
      h("td", {}, r.verb),
      h("td", {}, r.subject.startsWith("calendar:") ? r.subject : link(taskHash(r.subject), r.subject)),
      h("td", {}, r.state),
      h("td", {}, r.instance_ids.map((i) => h("div", {}, link(instanceHash(i), i, { class: "mono small" })))),
      h("td", { class: "small" },
        [...changes(r.diff), r.note ? `note: ${r.note}` : "", r.detail || ""].filter(Boolean).join("; ") || "–")))));
}

export function versionTable(taskId, versions, after) {
  return h("table", { "aria-label": "Versions" },
    h("thead", {}, h("tr", {}, ["Version", "Written", "By", "Verb", "Changed", ""]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, versions.slice().reverse().map((v) => h("tr", { "data-version": v.version },
      h("th", { scope: "row" }, `${v.version}${v.current ? " (current)" : ""}`),
      h("td", {}, utc(v.at)),
      h("td", { class: "mono" }, v.actor),
      h("td", {}, v.verb),
      h("td", { class: "small" }, changes(v.diff).join("; ") || "–"),
      h("td", {}, v.current ? "" : rollbackButton(taskId, v.version, after))))));
}

function rollbackButton(taskId, version, after) {
  const button = h("button", { type: "button", "aria-label": `Roll ${taskId} back to version ${version}`,
    "data-key": `rollback:${taskId}:${version}` }, "Roll back to this");
  button.addEventListener("click", () =>
    act(button, async () => {
      const done = await post(`/tasks/${encodeURIComponent(taskId)}/rollback`, { to: version });
      notify(done.changed ? `${taskId}: version ${done.version} has version ${version}'s definition.`
        : `${taskId}: version ${version}'s definition is already the current one.`);
      await after();
    }),
  );
  return button;
}

export function auditPage() {
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
}
