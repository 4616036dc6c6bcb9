// The Agentry page: sessions, a chat with streamed replies, a card per tool call with its
// progress, result and final state, Cancel buttons, and approval questions.
//
// Text from the model and from tools is only ever set with textContent: nothing it says is
// parsed as HTML, and the server's Content-Security-Policy allows no inline script.
"use strict";

const $ = (id) => document.getElementById(id);

const state = {
  token: sessionStorage.getItem("agentry-token"),
  session: null,
  lastEventId: 0,
  stream: null,       // AbortController of the event stream
  replying: false,
  // Input requests waiting, and the one shown.
  inputs: [],
  inputAsked: null,
  cards: new Map(),   // call id -> card element
  bubbles: new Map(), // message id -> bubble element
  asking: [],         // approval requests waiting for the user, in order
  asked: null,        // the call id the dialog shows
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function status(text) {
  $("status").textContent = text || "";
}

async function api(method, path, body) {
  const headers = {};
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) {
    const token = prompt("This server needs its token:");
    if (token) {
      state.token = token.trim();
      sessionStorage.setItem("agentry-token", state.token);
      return api(method, path, body);
    }
  }
  const text = await response.text();
  const value = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const message = value && value.error ? value.error.message : response.statusText;
    throw new Error(message);
  }
  return value;
}

// ---- sessions ----

async function loadSessions() {
  const { sessions } = await api("GET", "/v1/sessions");
  const list = $("sessions");
  list.replaceChildren();
  for (const session of sessions) {
    const item = el("li", session.id === state.session ? "current" : "", session.name);
    item.title = `${session.name} (${session.message_count} messages)`;
    item.addEventListener("click", () => openSession(session.id));
    list.append(item);
  }
}

async function openSession(id) {
  if (state.stream) state.stream.abort();
  state.session = id;
  state.cards.clear();
  state.bubbles.clear();
  state.asking = [];
  closeDialog();
  const shown = await api("GET", `/v1/sessions/${encodeURIComponent(id)}`);
  $("chat").hidden = false;
  $("session-title").textContent = shown.name;
  $("transcript").replaceChildren();
  const records = new Map((shown.calls || []).map((c) => [c.call_id, c]));
  for (const msg of shown.messages) showMessage(msg, true, records);
  for (const pending of shown.pending_approvals || []) {
    ask({ call_id: pending.call_id, name: pending.tool_name, request: pending.request });
  }
  renderPlan(shown.plan || null);
  setReplying(shown.replying);
  state.lastEventId = shown.last_event_id || 0;
  loadSessions().catch(() => {});
  follow(id);
}

// ---- the event stream (fetch, so that it can carry the token and Last-Event-ID) ----

async function follow(id) {
  const controller = new AbortController();
  state.stream = controller;
  let delay = 250;
  while (state.session === id && !controller.signal.aborted) {
    try {
      const headers = { "Last-Event-ID": String(state.lastEventId) };
      if (state.token) headers["Authorization"] = "Bearer " + state.token;
      const response = await fetch(`/v1/sessions/${encodeURIComponent(id)}/events`, {
        headers,
        signal: controller.signal,
      });
      if (response.status === 409) {
        // The server no longer has the events after ours: start again from the stored session.
        return openSession(id);
      }
      if (!response.ok) throw new Error(`events: HTTP ${response.status}`);
      delay = 250;
      await readEvents(response.body.getReader());
    } catch (e) {
      if (controller.signal.aborted) return;
      status("connection lost; reconnecting…");
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

async function readEvents(reader) {
  const decoder = new TextDecoder();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    pending += decoder.decode(value, { stream: true });
    let end;
    while ((end = pending.indexOf("\n\n")) >= 0) {
      const block = pending.slice(0, end);
      pending = pending.slice(end + 2);
      let id = null, kind = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("id:")) id = Number(line.slice(3).trim());
        else if (line.startsWith("event:")) kind = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
      }
      if (!data) continue;
      if (kind === "resume") return; // too slow: reconnect from our last id
      if (kind !== "agent") continue;
      status("");
      handle(JSON.parse(data));
      if (id !== null) state.lastEventId = id;
    }
  }
}

// ---- rendering ----

function bubble(msg) {
  let node = state.bubbles.get(msg.id);
  if (!node) {
    node = el("div", "msg " + msg.role);
    node.append(el("div", "thinking"), el("div", "text"));
    state.bubbles.set(msg.id, node);
    $("transcript").append(node);
  }
  return node;
}

// A call's call of its own (a sub-agent's tool call): a line under the card, one per nested
// call, replaced by its later reports. Text only: what a model or a tool says never runs as HTML.
function showNested(node, id, message) {
  const list = node.querySelector(".nested");
  let line = Array.from(list.children).find((li) => li.dataset.id === id);
  if (!line) {
    line = el("li", "");
    line.dataset.id = id;
    list.append(line);
  }
  line.textContent = message;
}

function card(callId, name) {
  let node = state.cards.get(callId);
  if (!node) {
    node = el("div", "card");
    node.dataset.call = callId;
    const head = el("div", "head");
    const cancel = el("button", "danger cancel", "Cancel");
    cancel.hidden = true;
    cancel.addEventListener("click", () => cancelCall(callId, cancel));
    head.append(el("span", "name", name || "tool"), el("span", "state", "written"), cancel);
    node.append(head, el("pre", "args"), el("div", "progress"), el("ul", "nested"), el("pre", "result"));
    state.cards.set(callId, node);
    $("transcript").append(node);
  }
  return node;
}

function setCardState(node, stateName, label) {
  node.className = "card " + stateName;
  node.querySelector(".state").textContent = label || stateName.replace("_", " ");
  const running = stateName === "running" || stateName === "asking";
  node.querySelector(".cancel").hidden = !running;
}

function stateOf(record) {
  // A stored call record (or a ToolFinished state) as a card state and label.
  const outcome = record && record.status ? record.status.outcome : record;
  if (!outcome || !outcome.state) return ["running", "running"];
  switch (outcome.state) {
    case "cancelled":
      if (outcome.reason === "restart") return ["interrupted", "interrupted by restart"];
      return ["cancelled", outcome.partial ? "cancelled (partial results)" : "cancelled"];
    case "timed_out":
      return ["timed_out", outcome.partial ? "timed out (partial results)" : "timed out"];
    default:
      return [outcome.state, outcome.state];
  }
}

function showMessage(msg, last, records) {
  if (msg.role === "user") {
    const text = msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    if (text) bubble(msg).querySelector(".text").textContent = text;
    return;
  }
  if (msg.role === "assistant") {
    const thinking = msg.content.filter((b) => b.type === "thinking").map((b) => b.thinking).join("");
    const text = msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    if (thinking || text) {
      const node = bubble(msg);
      node.querySelector(".thinking").textContent = thinking;
      node.querySelector(".text").textContent = text;
    }
    for (const block of msg.content) {
      if (block.type !== "tool_use") continue;
      const node = card(block.id, block.name);
      const args = block.input && typeof block.input === "object" && Object.keys(block.input).length
        ? JSON.stringify(block.input, null, 2)
        : (block.raw_input || "");
      node.querySelector(".args").textContent = args;
      if (records && records.has(block.id)) {
        const [name, label] = stateOf(records.get(block.id));
        setCardState(node, name, label);
      }
    }
    return;
  }
  // Tool results (and notes such as "interrupted") come as system messages.
  const note = msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");
  if (note && last) bubble(msg).querySelector(".text").textContent = note;
  if (last) {
    for (const block of msg.content) {
      if (block.type !== "tool_result") continue;
      const node = card(block.id, block.name);
      node.querySelector(".result").textContent = block.output
        .filter((b) => b.type === "text").map((b) => b.text).join("");
      node.querySelector(".progress").textContent = "";
      if (records && records.has(block.id)) {
        const [name, label] = stateOf(records.get(block.id));
        setCardState(node, name, label);
      }
    }
  }
}

function handle(event) {
  switch (event.type) {
    case "message":
      showMessage(event.msg, event.last, null);
      break;
    case "tool_started": {
      const node = card(event.call_id, event.name);
      node.querySelector(".args").textContent = JSON.stringify(event.input, null, 2);
      setCardState(node, "running");
      break;
    }
    case "tool_progress":
      if (event.nested && event.id) {
        showNested(card(event.call_id), event.id, event.message);
      } else {
        card(event.call_id).querySelector(".progress").textContent = "⋯ " + event.message;
      }
      break;
    case "approval_requested":
      if (!event.automatic) {
        setCardState(card(event.call_id, event.name), "asking", "waiting for approval");
        ask(event);
      }
      break;
    case "input_requested":
      state.inputs.push(event);
      showNextInput();
      break;
    case "input_answered":
      settleInput(event.call_id);
      break;
    case "approval_resolved":
    case "approval_withdrawn":
      settle(event.call_id);
      settleInput(event.call_id);
      if (event.type === "approval_resolved" && event.decision.decision.startsWith("approve")) {
        setCardState(card(event.call_id), "running");
      }
      break;
    case "tool_finished": {
      const [name, label] = stateOf(event.state);
      setCardState(card(event.call_id, event.name), name, label);
      card(event.call_id).querySelector(".progress").textContent = "";
      break;
    }
    case "plan_changed":
      renderPlan(event.plan || null);
      break;
    case "reply_finished":
      setReplying(false);
      if (event.stop_reason && event.stop_reason.reason === "cancelled") {
        $("transcript").append(el("div", "note", "reply cancelled"));
      }
      loadSessions().catch(() => {});
      break;
  }
  $("transcript").scrollTop = $("transcript").scrollHeight;
}

// ---- the plan (with --plan): a checklist, updated as plan_changed events arrive ----

const SUBTASK_MARKS = { done: "☑", in_progress: "▶", abandoned: "☒", todo: "☐" };

function renderPlan(plan) {
  const panel = $("plan");
  panel.replaceChildren();
  panel.hidden = !plan;
  if (!plan) return;
  const done = plan.subtasks.filter((s) => s.state === "done").length;
  panel.append(el("h3", "", `Plan: ${plan.name} (${done} of ${plan.subtasks.length} done)`));
  const list = el("ol", "subtasks");
  list.start = 0;
  for (const subtask of plan.subtasks) {
    const item = el("li", "subtask " + subtask.state);
    item.dataset.state = subtask.state;
    item.append(el("span", "mark", SUBTASK_MARKS[subtask.state] || "☐"), el("span", "name", subtask.name));
    if (subtask.outcome) item.append(el("span", "outcome", subtask.outcome));
    item.title = subtask.description;
    list.append(item);
  }
  panel.append(list);
}

function setReplying(replying) {
  state.replying = replying;
  $("cancel-reply").hidden = !replying;
  // While a reply runs, a message steers it: the agent reads it before its next step.
  $("send").textContent = replying ? "Add to reply" : "Send";
}

// ---- approvals ----

function ask(request) {
  if (!state.asking.some((r) => r.call_id === request.call_id)) state.asking.push(request);
  showNextQuestion();
}

function showNextQuestion() {
  const dialog = $("approval");
  if (state.asked || state.asking.length === 0 || $("input").open) return;
  const next = state.asking[0];
  state.asked = next.call_id;
  const request = next.request || {};
  $("approval-title").textContent = request.title || `Run ${next.name}?`;
  $("approval-message").textContent = request.message || "";
  const preview = $("approval-preview");
  preview.hidden = !request.preview;
  preview.textContent = request.preview || "";
  $("approval-reason").value = "";
  if (!dialog.open) dialog.showModal();
}

function settle(callId) {
  state.asking = state.asking.filter((r) => r.call_id !== callId);
  if (state.asked === callId) {
    closeDialog();
    showNextQuestion();
  }
}

function closeDialog() {
  state.asked = null;
  if ($("approval").open) $("approval").close();
  showNextInput();
}

// ---- input requests (a form an MCP server asks for) ----

// The choices of an enum schema: [value, label] pairs, from `enum` (+ `enumNames`) or
// `oneOf`/`anyOf` of {const, title}.
function choicesOf(schema) {
  if (!schema) return null;
  if (Array.isArray(schema.enum)) {
    return schema.enum.map((v, i) => [String(v), String((schema.enumNames || [])[i] || v)]);
  }
  const options = schema.oneOf || schema.anyOf;
  if (Array.isArray(options)) return options.map((o) => [String(o.const), String(o.title || o.const)]);
  return null;
}

function field(name, schema, required) {
  const label = el("label", "field");
  const title = (schema.title || name) + (required ? " *" : "");
  label.append(el("span", "title", title));
  if (schema.description) label.append(el("span", "hint", schema.description));
  let control;
  const multi = schema.type === "array";
  const choices = multi ? choicesOf(schema.items) : choicesOf(schema);
  if (schema.type === "boolean") {
    control = el("input");
    control.type = "checkbox";
    control.checked = schema.default === true;
  } else if (choices) {
    control = el("select");
    control.multiple = multi;
    for (const [value, text] of choices) {
      const option = el("option", null, text);
      option.value = value;
      const chosen = multi ? (schema.default || []).includes(value) : schema.default === value;
      option.selected = chosen;
      control.append(option);
    }
  } else {
    control = el("input");
    control.type = schema.type === "integer" || schema.type === "number" ? "number" : "text";
    if (schema.type === "number") control.step = "any";
    if (schema.default !== undefined) control.value = String(schema.default);
  }
  control.dataset.name = name;
  control.dataset.kind = multi ? "array" : schema.type || "string";
  control.dataset.required = required ? "1" : "";
  label.append(control);
  return label;
}

function showNextInput() {
  const dialog = $("input");
  if (state.inputAsked || state.inputs.length === 0 || $("approval").open) return;
  const next = state.inputs[0];
  state.inputAsked = next.call_id;
  $("input-title").textContent = `${next.name} asks`;
  $("input-message").textContent = next.message || "";
  $("input-error").hidden = true;
  const fields = $("input-fields");
  fields.replaceChildren();
  const schema = next.schema || {};
  const required = schema.required || [];
  for (const [name, property] of Object.entries(schema.properties || {})) {
    fields.append(field(name, property || {}, required.includes(name)));
  }
  if (!dialog.open) dialog.showModal();
}

function settleInput(callId) {
  state.inputs = state.inputs.filter((r) => r.call_id !== callId);
  if (state.inputAsked === callId) {
    state.inputAsked = null;
    if ($("input").open) $("input").close();
    showNextInput();
    showNextQuestion();
  }
}

function formValues() {
  const content = {};
  for (const control of $("input-fields").querySelectorAll("[data-name]")) {
    const name = control.dataset.name;
    switch (control.dataset.kind) {
      case "boolean":
        content[name] = control.checked;
        break;
      case "array":
        content[name] = Array.from(control.selectedOptions).map((o) => o.value);
        break;
      case "integer":
      case "number":
        if (control.value !== "") content[name] = Number(control.value);
        break;
      default:
        // Left empty, it is left out: a required field then fails the form's check.
        if (control.value !== "") content[name] = control.value;
    }
  }
  return content;
}

async function answerInput(action) {
  const callId = state.inputAsked;
  if (!callId) return;
  const body = action === "accept" ? { action, content: formValues() } : { action };
  try {
    await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/inputs/${encodeURIComponent(callId)}`, body);
    settleInput(callId);
  } catch (e) {
    // The form did not fit: it stays open, with why.
    $("input-error").textContent = e.message;
    $("input-error").hidden = false;
  }
}

async function decide(decision) {
  const callId = state.asked;
  if (!callId) return;
  const body = { decision };
  const reason = $("approval-reason").value.trim();
  if (decision.startsWith("decline") && reason) body.reason = reason;
  try {
    await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/calls/${encodeURIComponent(callId)}/decision`, body);
  } catch (e) {
    status(e.message);
  }
  settle(callId);
}

// ---- actions ----

async function cancelCall(callId, button) {
  button.disabled = true;
  try {
    await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/calls/${encodeURIComponent(callId)}/cancel`, {});
  } catch (e) {
    status(e.message);
  }
}

async function send(event) {
  event.preventDefault();
  const text = $("prompt").value;
  if (!text.trim() || !state.session) return;
  try {
    const steer = state.replying;
    const answer = await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/messages`, { text, steer });
    $("prompt").value = "";
    if (answer && answer.steered) {
      // The agent shows it when it joins the conversation, before its next step.
      status("Added to the running reply: the agent reads it before its next step.");
      return;
    }
    // The agent does not announce the user's own message; it is in the history on reload.
    const mine = el("div", "msg user");
    mine.append(el("div", "thinking"), el("div", "text", text));
    $("transcript").append(mine);
    setReplying(true);
  } catch (e) {
    status(e.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("cancel-reply").addEventListener("click", async () => {
    try {
      await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/cancel`, {});
    } catch (e) {
      status(e.message);
    }
  });
  $("new-session").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const created = await api("POST", "/v1/sessions", { name: $("new-session-name").value });
      $("new-session-name").value = "";
      await openSession(created.id);
    } catch (err) {
      status(err.message);
    }
  });
  for (const button of document.querySelectorAll("#input [data-input]")) {
    button.addEventListener("click", () => answerInput(button.dataset.input));
  }
  for (const button of document.querySelectorAll("#approval [data-decision]")) {
    button.addEventListener("click", () => decide(button.dataset.decision));
  }
  $("approval").addEventListener("cancel", (e) => e.preventDefault());
  loadSessions().catch((e) => status(e.message));
});
