// An instance's page: its facts and actions, the shard grid, and the selected shard's detail.

import {
  OPEN, SHARD_STATES, SYMBOL, act, badge, duration, fact, get, h, instanceHash, link, notify, post, swap,
  taskHash, utc, words,
} from "./common.js";
import { attemptLog } from "./logs.js";

export function instancePage(instanceId) {
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
          fact("Priority", instance.priority),
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
