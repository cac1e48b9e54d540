// The run inspector: reads the app's API with the token the person gave (kept in this tab's
// sessionStorage, sent only in the Authorization header), and shows everything a run holds
// as text (textContent only: what models and tools wrote is never parsed as HTML).
"use strict";

const TOKEN_KEY = "raygents-api-token";
const state = { selected: null, stream: null, tokens: new Map(), runs: [], lastId: null };

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function headers(extra) {
  const h = Object.assign({ "Accept": "application/json" }, extra || {});
  if (token()) { h["Authorization"] = "Bearer " + token(); }
  return h;
}

async function api(method, path, body) {
  const options = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) { options.body = JSON.stringify(body); }
  const answer = await fetch(path, options);
  const doc = await answer.json().catch(() => ({}));
  if (answer.status === 401) { notice("This app needs its API token: enter it above."); }
  if (!answer.ok) {
    const err = (doc && doc.error) || { type: "HTTPError", message: String(answer.status) };
    throw new Error(err.type + ": " + err.message);
  }
  return doc;
}

function notice(text) { document.getElementById("notice").textContent = text || ""; }

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) { node.textContent = String(text); }
  if (cls) { node.className = cls; }
  return node;
}

function shown(value) {
  if (value === null || value === undefined) { return ""; }
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function ago(seconds) {
  if (!seconds) { return ""; }
  const d = Math.max(0, Date.now() / 1000 - seconds);
  if (d < 60) { return Math.round(d) + " s ago"; }
  if (d < 3600) { return Math.round(d / 60) + " min ago"; }
  return new Date(seconds * 1000).toLocaleString();
}

// --- the runs table ---------------------------------------------------------------------
async function refreshRuns() {
  let doc;
  try { doc = await api("GET", "v1/runs?limit=200"); } catch (e) { notice(e.message); return; }
  notice("");
  state.runs = doc.runs;
  const body = document.querySelector("#runs tbody");
  const rows = doc.runs.filter((r) => !r.parent).map(runRow);
  body.replaceChildren(...rows);
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  if (state.selected) { refreshDetail(false); }
}

function runRow(run) {
  const tr = el("tr");
  tr.dataset.runId = run.run_id;
  if (run.run_id === state.selected) { tr.classList.add("selected"); }
  tr.append(el("td", run.run_id), el("td", run.status, "status status-" + run.status),
            el("td", run.last_agent), el("td", run.turns), tokenCell(run), el("td", ago(run.updated_at)));
  tr.addEventListener("click", () => select(run.run_id));
  return tr;
}

function tokenCell(run) {
  const cell = el("td");
  const key = run.run_id + "@" + run.updated_at;
  const known = state.tokens.get(key);
  if (known !== undefined) { cell.textContent = known; return cell; }
  api("GET", "v1/runs/" + encodeURIComponent(run.run_id)).then((doc) => {
    const total = (doc.usage.input_tokens || 0) + (doc.usage.output_tokens || 0);
    state.tokens.set(key, total);
    cell.textContent = total;
  }).catch(() => {});
  return cell;
}

// --- one run ----------------------------------------------------------------------------
function select(runId) {
  state.selected = runId;
  for (const tr of document.querySelectorAll("#runs tbody tr")) {
    tr.classList.toggle("selected", tr.dataset.runId === runId);
  }
  document.getElementById("detail").hidden = false;
  document.getElementById("events").replaceChildren();
  state.lastId = null;
  followEvents(runId);
  refreshDetail(true);
}

async function refreshDetail() {
  const runId = state.selected;
  let run, messages;
  try {
    run = await api("GET", "v1/runs/" + encodeURIComponent(runId));
    messages = await api("GET", "v1/runs/" + encodeURIComponent(runId) + "/messages");
  } catch (e) { notice(e.message); return; }
  if (runId !== state.selected) { return; }
  document.getElementById("detail-id").textContent = run.run_id;
  const status = document.getElementById("detail-status");
  status.textContent = run.status;
  status.className = "status status-" + run.status;
  showFacts(run);
  showPending(run);
  document.getElementById("output").textContent = shown(run.output !== null ? run.output : (run.error && run.error.message));
  showTree(run, messages.messages);
  showMessages(messages.messages);
  const version = runId + " " + run.status + " " + run.updated_at;
  if (state.historyOf !== version) { state.historyOf = version; showHistory(runId); }
  document.getElementById("suspend").disabled = run.status !== "running";
  document.getElementById("cancel").disabled = run.status !== "running";
  document.getElementById("resume").disabled = run.status !== "suspended";
}

function showFacts(run) {
  const facts = document.getElementById("facts");
  const rows = [["agent", run.agent || run.last_agent], ["last agent", run.last_agent],
                ["turns", run.turns], ["input tokens", run.usage.input_tokens],
                ["output tokens", run.usage.output_tokens], ["model calls", run.usage.requests],
                ["thread", run.thread_id], ["webhook", run.webhook && run.webhook.state],
                ["updated", ago(run.updated_at)]];
  facts.replaceChildren(...rows.filter((r) => r[1] !== null && r[1] !== undefined && r[1] !== "")
    .flatMap((r) => [el("dt", r[0]), el("dd", r[1])]));
}

function showPending(run) {
  const list = document.getElementById("pending");
  const items = run.pending.map((p) => {
    const li = el("li");
    li.dataset.callId = p.call_id;
    li.append(el("span", p.tool_name, "role"), el("span", "(" + p.agent_name + ", call " + p.call_id + ")", "muted"),
              el("pre", p.arguments));
    const yes = el("button", "Approve", "approve");
    const no = el("button", "Deny", "deny");
    yes.type = no.type = "button";
    yes.addEventListener("click", () => decide(run, p.call_id, true));
    no.addEventListener("click", () => decide(run, p.call_id, false));
    li.append(yes, no);
    return li;
  });
  list.replaceChildren(...(items.length ? items : [el("li", "none", "muted")]));
}

async function decide(run, callId, approved) {
  // One decision per click; the rest of the pending calls are denied only if the person
  // decides them too: the API takes a decision for every pending call at once.
  const decisions = {};
  for (const p of run.pending) { decisions[p.call_id] = p.call_id === callId ? approved : pendingChoice(p.call_id); }
  if (Object.values(decisions).some((d) => d === undefined)) {
    state.choices = Object.assign(state.choices || {}, { [callId]: approved });
    notice("Decide every pending call: " + run.pending.length + " wait.");
    return;
  }
  try {
    await api("POST", "v1/runs/" + encodeURIComponent(run.run_id) + "/approvals", { decisions });
    state.choices = {};
    notice("Decided; the run goes on.");
  } catch (e) { notice(e.message); }
  followEvents(run.run_id);
  refreshDetail();
}

function pendingChoice(callId) { return (state.choices || {})[callId]; }

function showTree(run, messages) {
  const results = new Map(messages.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, shown(m.content)]));
  const items = [];
  for (const m of messages) {
    for (const c of m.tool_calls || []) {
      if (c.function.name.startsWith("transfer_to_")) {
        items.push(el("li", "handoff → " + (results.get(c.id) || c.function.name).replace(/^Transferred to /, "")));
      }
    }
  }
  for (const child of state.runs.filter((r) => r.parent === run.run_id)) {
    const li = el("li", "child " + child.run_id + " (" + child.last_agent + ", " + child.status + ")");
    li.addEventListener("click", () => select(child.run_id));
    items.push(li);
  }
  document.getElementById("tree").replaceChildren(...(items.length ? items : [el("li", "none", "muted")]));
}

function showMessages(messages) {
  document.getElementById("messages").replaceChildren(...messages.map((m) => {
    const li = el("li");
    li.append(el("span", m.role, "role"));
    if (m.content !== null && m.content !== undefined && m.content !== "") { li.append(el("div", shown(m.content), "text")); }
    for (const c of m.tool_calls || []) { li.append(el("div", "call " + c.function.name + " " + c.function.arguments, "text")); }
    return li;
  }));
}

async function showHistory(runId) {
  // A run's durable checkpoints (a run queued in a thread has none yet: "none"), read again
  // only when the run changed.
  let doc;
  try { doc = await api("GET", "v1/runs/" + encodeURIComponent(runId) + "/history"); } catch (e) { doc = { checkpoints: [] }; }
  if (runId !== state.selected) { return; }
  const items = doc.checkpoints.map((c) => {
    const li = el("li");
    li.dataset.seq = c.seq;
    li.append(el("span", c.reason, "role"),
              el("span", "seq " + c.seq + " · turn " + c.turn + " · " + c.agent_name + " · " + c.messages + " messages · " + c.at, "muted"),
              el("div", shown(c.last), "text"));
    return li;
  });
  document.getElementById("history").replaceChildren(...(items.length ? items : [el("li", "none", "muted")]));
}

// --- live events (fetch, not EventSource: the token goes in a header, never the URL) ------
async function followEvents(runId) {
  if (state.stream) { state.stream.abort(); }
  const control = new AbortController();
  state.stream = control;
  const list = document.getElementById("events");
  try {
    const h = headers({ "Accept": "text/event-stream" });
    if (state.lastId !== null) { h["Last-Event-ID"] = String(state.lastId); }
    const answer = await fetch("v1/runs/" + encodeURIComponent(runId) + "/events", { headers: h, signal: control.signal });
    if (!answer.ok) { return; }
    const reader = answer.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) { break; }
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const event = parseFrame(frame);
        if (event && runId === state.selected) {
          if (event.id !== null) { state.lastId = event.id; }
          list.append(eventItem(event));
          list.scrollTop = list.scrollHeight;
        }
      }
    }
  } catch (e) { if (e.name !== "AbortError") { notice(e.message); } }
  if (runId === state.selected) { refreshDetail(); }
}

function parseFrame(frame) {
  const event = { id: null, type: "message", data: "" };
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) { continue; }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "id") { event.id = value; } else if (field === "event") { event.type = value; } else if (field === "data") { event.data += value; }
  }
  if (!event.data) { return null; }
  try { event.data = JSON.parse(event.data); } catch (e) { return null; }
  return event;
}

function eventItem(event) {
  const d = event.data;
  const what = d.delta || d.tool_name || d.to_agent || d.output || d.error || d.result || "";
  const li = el("li");
  li.append(el("span", (event.id === null ? "" : event.id + " ") + event.type + " ", "role"), el("span", (d.agent_name || "") + " " + shown(what)));
  return li;
}

async function control(action) {
  if (!state.selected) { return; }
  try { await api("POST", "v1/runs/" + encodeURIComponent(state.selected) + "/" + action); } catch (e) { notice(e.message); }
  if (action === "resume") { followEvents(state.selected); }
  refreshDetail();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("token");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    refreshRuns();
  });
  document.getElementById("forget-token").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); notice("Token forgotten."); });
  for (const action of ["suspend", "resume", "cancel"]) {
    document.getElementById(action).addEventListener("click", () => control(action));
  }
  refreshRuns();
  setInterval(refreshRuns, 2000);
});
