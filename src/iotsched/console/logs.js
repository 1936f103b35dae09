// The console's attempt logs: what a shard's handler logged, attempt by attempt. The API gives
// the whole log (from the data bucket) when the record's tail lacks some, else the tail.

import { get, h, utc } from "./common.js";

const ended = new Map();  // the logs of ended attempts: they never change
const chosen = new Map();  // "instance|shard" -> the attempt shown (default: the latest)

async function fetchLog(instanceId, shard, attempt) {
  const key = `${instanceId}|${shard}|${attempt}`;
  if (ended.has(key)) return ended.get(key);
  const log = await get(`/instances/${encodeURIComponent(instanceId)}/shards/${shard}/logs?attempt=${attempt}`);
  if (log.outcome) ended.set(key, log);
  return log;
}

function lineItem(line) {
  const fields = Object.entries(line.fields || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ");
  return h("li", { "data-level": line.level.toLowerCase() },
    h("span", { class: "mono small" }, utc(line.at)), " ",
    h("span", { class: `level level-${line.level.toLowerCase()}` }, line.level), " ",
    h("pre", { class: "mono" }, fields ? `${line.message} ${fields}` : line.message));
}

function logBody(log) {
  const facts = `Attempt ${log.attempt}: ${log.outcome || "running"}, ${log.line_count} lines, ${log.byte_count} bytes`;
  const notes = [];
  if (!log.complete) {
    notes.push(`The last ${log.lines.length} lines; ${log.line_count - log.lines.length} earlier ones are not `
      + `available: ${log.object_error || log.note || "the log object is missing"}.`);
  } else if (log.note) notes.push(log.note);
  return h("div", {},
    h("p", { class: "small" }, facts, log.source === "object" ? " (the whole log, from the data bucket)" : ""),
    log.lines.length
      ? h("ol", { class: "log-lines", "aria-label": `Log lines of attempt ${log.attempt}` }, log.lines.map(lineItem))
      : h("p", { class: "small" }, log.outcome ? "The attempt logged nothing." : "Its log is kept when it ends."),
    notes.map((n) => h("p", { class: "small" }, n)),
    log.insights_query
      ? h("div", { class: "small" }, `CloudWatch: ${log.log_group} ${log.log_stream}`,
        h("pre", { class: "mono", "aria-label": "Logs Insights query" }, log.insights_query))
      : null);
}

/** The log section of a shard's detail: a button per attempt, the chosen attempt's lines. */
export function attemptLog(instanceId, shard) {
  const section = h("section", { "aria-label": `Log of shard ${shard.index}`, class: "log" }, h("h3", {}, "Log"));
  const attempts = shard.attempts || [];
  if (!attempts.length) {
    section.append(h("p", { class: "small" }, "No attempt yet."));
    return section;
  }
  const key = `${instanceId}|${shard.index}`;
  const latest = attempts[attempts.length - 1].number;
  const body = h("div", { "aria-live": "polite" }, h("p", { class: "small" }, "Reading the log…"));
  const show = async (attempt) => {
    chosen.set(key, attempt);
    for (const b of section.querySelectorAll("button[data-attempt]")) {
      b.setAttribute("aria-pressed", b.dataset.attempt === String(attempt) ? "true" : "false");
    }
    try {
      const log = await fetchLog(instanceId, shard.index, attempt);
      if (chosen.get(key) === attempt) body.replaceChildren(logBody(log));
    } catch (error) {
      body.replaceChildren(h("p", { class: "field-error" }, `The log could not be read: ${error.message}`));
    }
  };
  if (attempts.length > 1) {
    section.append(h("div", { class: "actions", role: "group", "aria-label": "Attempt" }, attempts.map((a) => {
      const button = h("button", { type: "button", "data-attempt": a.number, "data-key": `log:${shard.index}:${a.number}` },
        `Attempt ${a.number}`);
      button.addEventListener("click", () => show(a.number));
      return button;
    })));
  }
  section.append(body);
  const wanted = chosen.get(key);
  show(attempts.some((a) => a.number === wanted) ? wanted : latest);
  return section;
}
