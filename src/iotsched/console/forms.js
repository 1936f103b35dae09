// The task forms: pause (with its optional note), run now, edit.

import { act, call, get, h, instanceHash, notify, post } from "./common.js";

// The API's limit on a pause note (services/pausing.py MAX_NOTE_CHARS; a unit test holds them equal).
export const MAX_NOTE_CHARS = 500;
const PRIORITIES = ["high", "normal", "low"];

/** Resume at once; pause through a small form that asks why (the note is optional). */
export function pauseButton(task, after, open) {
  const verb = task.paused ? "Resume" : "Pause";
  const key = `pause:${task.id}`;
  const label = task.paused ? `Resume ${task.id}` : `Pause ${task.id}…`;
  const button = h("button", { type: "button", "aria-label": label, "data-key": key }, task.paused ? verb : `${verb}…`);
  button.addEventListener("click", () => {
    if (!task.paused) {
      open(pauseForm(task, after));
      return;
    }
    act(button, async () => {
      const changed = await post(`/tasks/${encodeURIComponent(task.id)}/resume`);
      notify(`${task.id} ${changed.paused ? "paused" : "resumed"}.`);
      await after();
    });
  });
  return button;
}

function pauseForm(task, after) {
  const id = `pause-note-${task.id}`;
  const input = h("input", { id, name: "note", maxlength: MAX_NOTE_CHARS, "aria-describedby": `${id}-hint` });
  const error = h("p", { class: "field-error", id: `${id}-error`, hidden: true });
  const form = h("form", { class: "panel card", "aria-label": `Pause ${task.id}` },
    h("h3", {}, `Pause ${task.id}`),
    h("div", {},
      h("label", { for: id }, "Note (optional)"),
      input,
      h("p", { class: "hint", id: `${id}-hint` },
        `Why it is paused, up to ${MAX_NOTE_CHARS} characters: shown with the task until it is resumed.`),
      error),
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary" }, "Pause"),
      h("button", { type: "button", onclick: () => form.remove() }, "Cancel")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    act(form.querySelector("button[type=submit]"), async () => {
      error.hidden = true;
      input.removeAttribute("aria-invalid");
      const note = input.value.trim();
      try {
        const changed = await post(`/tasks/${encodeURIComponent(task.id)}/pause`, note ? { note } : {});
        notify(`${task.id} ${changed.paused ? "paused" : "resumed"}.`);
      } catch (failure) {
        if (failure.status !== 400) throw failure;
        error.textContent = failure.problems.map((p) => p.message).join("; ") || failure.message;
        error.hidden = false;
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-errormessage", error.id);
        input.focus();
        return;
      }
      form.remove();
      await after();
      // the keyboard goes on from the task's button, now "Resume"
      document.querySelector(`[data-key="${CSS.escape(`pause:${task.id}`)}"]`)?.focus({ preventScroll: true });
    });
  });
  return form;
}

/** The run-now form: a business date (empty: the task's own rule for the current minute) and a
 * priority (empty: the task's own). */
export function runForm(task, after) {
  const id = `run-date-${task.id}`;
  const input = h("input", { type: "date", id, name: "business_date", "aria-describedby": `${id}-hint` });
  const priority = h("select", { id: `run-priority-${task.id}`, name: "priority" },
    h("option", { value: "" }, "The task's own"), PRIORITIES.map((p) => h("option", { value: p }, p)));
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
    h("div", {},
      h("label", { for: `run-priority-${task.id}` }, "Priority"),
      priority,
      h("p", { class: "hint" }, "The shard queue of its shards: low work never holds up high or normal work.")),
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
      if (priority.value) body.priority = priority.value;
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
export async function editForm(taskId, after) {
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
