// fim development page. Plain ES module, no dependencies: it uses only the public HTTP API
// and its SSE streams (read with fetch, so the bearer key can be sent). Everything from
// the server is put in the page as text (textContent), never as HTML.

const $ = (sel) => document.querySelector(sel);
const KEY = "fim.apiKey";
const state = { agents: [], workflows: [], agent: null, approvals: [], wfRun: null, graph: null, sessions: new Set() };

// ------------------------------------------------------------------ DOM helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const svg = (tag, attrs = {}) => {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
};

const json = (value) => JSON.stringify(value, null, 2);
const ms = (v) => (v === undefined || v === null ? "" : `${Math.round(v)} ms`);
/** Dollars, to three significant digits under $1 ("$0.000394"), cents above; "" when unknown. */
const money = (c) => {
  if (c === null || c === undefined) return "";
  if (c === 0) return "$0";
  if (c < 1e-6) return "<$0.000001";
  return c >= 1 ? `$${c.toFixed(2)}` : `$${Number(c.toPrecision(3))}`;
};
const duration = (v) => {
  if (v === undefined || v === null) return "";
  if (v < 1000) return `${Math.round(v)} ms`;
  if (v < 60000) return `${(v / 1000).toFixed(1)} s`;
  return `${Math.floor(v / 60000)} min ${Math.round((v % 60000) / 1000)} s`;
};
const tokens = (u) => (u ? (u.prompt_tokens || 0) + (u.completion_tokens || 0) : null);

// ------------------------------------------------------------------ API

class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    const said = e.message || "request failed";  // the server puts the hint at its end
    super(`${status}: ${said}${e.hint && !said.includes(e.hint) ? ` (${e.hint})` : ""}`);
    this.status = status;
  }
}

function headers(extra = {}) {
  const key = sessionStorage.getItem(KEY);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function request(method, path, body) {
  for (let attempt = 0; attempt < 2; attempt++) {
    const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
    if (body) init.body = JSON.stringify(body);
    // relative to the page: behind a proxy's path prefix (server.root_path) it carries it
    const res = await fetch(path.replace(/^\//, ""), init);
    if (res.status === 401 && attempt === 0 && (await askKey())) continue;
    if (!res.ok) throw new ApiError(res.status, await res.json().catch(() => null));
    if (body && body.stream) return res;
    const type = res.headers.get("content-type") || "";
    return type.includes("event-stream") ? res : res.json();
  }
  throw new ApiError(401, { error: { message: "an API key is needed" } });
}

const get = (path) => request("GET", path);
const post = (path, body) => request("POST", path, body);
const del = (path) => request("DELETE", path);

/** Server-sent events of a fetch Response, one {event, data} at a time. */
async function* events(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replaceAll("\r\n", "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

let keyPrompt = null;
function askKey() {
  if (keyPrompt) return keyPrompt;
  const dialog = $("#key-dialog");
  keyPrompt = new Promise((resolve) => {
    $("#key-input").value = "";
    dialog.addEventListener(
      "close",
      () => {
        keyPrompt = null;
        const value = $("#key-input").value.trim();
        if (dialog.returnValue === "ok" && value) {
          sessionStorage.setItem(KEY, value);
          resolve(true);
        } else resolve(false);
      },
      { once: true },
    );
    dialog.showModal();
  });
  return keyPrompt;
}

function showError(container, err) {
  container.append(el("li", { class: "ev-error", role: "alert" }, el("span", { class: "kind" }, "error "), err.message || String(err)));
}

// ------------------------------------------------------------------ tabs (WAI-ARIA tabs pattern)

function selectTab(tab, focus = true) {
  for (const t of document.querySelectorAll("[role=tab]")) {
    const on = t === tab;
    t.setAttribute("aria-selected", String(on));
    t.tabIndex = on ? 0 : -1;
    $(`#${t.getAttribute("aria-controls")}`).hidden = !on;
  }
  if (focus) tab.focus();
  history.replaceState(null, "", `#${tab.getAttribute("aria-controls")}`);
  if (tab.id === "tab-approvals") loadApprovals();
  if (tab.id === "tab-runs") loadRuns();
}

function setupTabs() {
  const tabs = [...document.querySelectorAll("[role=tab]")];
  for (const tab of tabs) {
    tab.addEventListener("click", () => selectTab(tab));
    tab.addEventListener("keydown", (e) => {
      const i = tabs.indexOf(tab);
      const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
      if (next === undefined) return;
      e.preventDefault();
      selectTab(tabs[(next + tabs.length) % tabs.length]);
    });
  }
  const fromHash = () => {
    const tab = tabs.find((t) => `#${t.getAttribute("aria-controls")}` === location.hash);
    if (tab) selectTab(tab, false);
  };
  window.addEventListener("hashchange", fromHash);
  fromHash();
}

// ------------------------------------------------------------------ status (reload state)

let shownSnapshot = null;
function renderStatus(s) {
  $("#project").textContent = s.project;
  state.unavailable = new Map((s.unavailable || []).map((u) => [u.agent, u.reason]));
  if (shownSnapshot !== null && shownSnapshot !== s.snapshot) {
    // a reload: the lists, and the open agent's declaration and prompt, are the new snapshot's
    loadCatalogue()
      .then(() => state.agent && showAgent(state.agent, { quiet: true }))
      .catch(() => {});
  }
  shownSnapshot = s.snapshot;
  renderUnavailable();
  const box = $("#reload");
  const version = (s.snapshot || "").slice(0, 12);
  box.textContent = `snapshot ${version} · ${s.reloads} reload${s.reloads === 1 ? "" : "s"} · ${s.active_runs} active run${s.active_runs === 1 ? "" : "s"}`;
  const err = s.last_reload_error;
  box.classList.toggle("bad", !!err);
  const alert = $("#reload-error");
  alert.hidden = !err;
  alert.replaceChildren();
  if (err) {
    alert.append(
      el("strong", {}, "Reload failed: still serving the last good snapshot."),
      el("pre", { id: "reload-error-text" }, err.text),
    );
  }
}

/** The yellow banner of agents the loaded snapshot cannot run (a broken skill they use),
 * and their marks in the Agents list: the reload worked, but these agents fail. */
function renderUnavailable() {
  const gone = state.unavailable || new Map();
  const banner = $("#reload-warning");
  banner.hidden = !gone.size;
  banner.replaceChildren();
  if (gone.size) {
    const n = gone.size;
    banner.append(
      el("strong", {}, `Loaded, but ${n} agent${n === 1 ? "" : "s"} cannot run until fixed:`),
      el("pre", { id: "reload-warning-text" }, [...gone].map(([a, why]) => `${a}: ${why}`).join("\n")),
    );
  }
  for (const b of document.querySelectorAll("#agent-list [data-agent]")) {
    const why = gone.get(b.dataset.agent);
    b.classList.toggle("unavailable", !!why);
    b.querySelector("small.unavailable")?.remove();
    if (why) b.append(el("small", { class: "unavailable", title: why }, "⚠ unavailable"));
    if (why) b.title = why;
    else b.removeAttribute("title");
  }
}

async function watchStatus() {
  for (;;) {
    try {
      const res = await get("/v1/status/stream");
      for await (const { event, data } of events(res)) if (event === "status") renderStatus(data);
    } catch (err) {
      $("#reload").textContent = `status unavailable: ${err.message}`;
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
}

// ------------------------------------------------------------------ agents and workflows

async function loadCatalogue() {
  const [{ agents }, { workflows }] = await Promise.all([get("/v1/agents"), get("/v1/workflows")]);
  state.agents = agents;
  state.workflows = workflows;
  const list = $("#agent-list");
  list.replaceChildren(
    ...agents.map((a) =>
      el("li", {}, el("button", { type: "button", "data-agent": a.name, onclick: () => showAgent(a.name) }, a.name, el("small", {}, a.description))),
    ),
  );
  $("#workflow-list").replaceChildren(
    ...workflows.map((w) =>
      el("li", {}, el("button", { type: "button", "data-workflow": w.name, onclick: () => openWorkflow(w.name) }, w.name, el("small", {}, w.description))),
    ),
  );
  renderUnavailable();
  const chatAgent = $("#chat-agent");
  const chosen = chatAgent.value;
  chatAgent.replaceChildren(...agents.map((a) => el("option", { value: a.name }, a.name)));
  if (chosen) chatAgent.value = chosen;
  const wf = $("#wf-select");
  const wfChosen = wf.value;
  wf.replaceChildren(...workflows.map((w) => el("option", { value: w.name }, w.name)));
  if (wfChosen) wf.value = wfChosen;
  if (!state.graph && workflows.length) openWorkflow(wf.value || workflows[0].name, false);
}

/** A declaration's list field as a list, whatever shape the API sends: a list, one name,
 * `"all"` (skills: all), or nothing. */
const asList = (v) => (Array.isArray(v) ? v : v === null || v === undefined || v === "" ? [] : [v]);

/** An agent's model as text: a role or litellm string, or the `model` of full settings. */
const modelLabel = (m) => (m && typeof m === "object" ? m.model || json(m) : m || "");

function hookLabel(h) {
  if (typeof h === "string") return h;
  const what = h.use || (h.ref && `ref ${h.ref}`) || (h.command && `command ${h.command}`) || (h.python && `python ${h.python}`) || "hook";
  return [h.event, what, h.matcher && `on ${h.matcher}`].filter(Boolean).join(" · ");
}

/** The agent's declaration and prompt. `quiet`: redrawn after a reload, without the
 * "Loading" placeholder, and only if the agent is still the one open. */
async function showAgent(name, { quiet = false } = {}) {
  for (const b of document.querySelectorAll("[data-agent]")) b.setAttribute("aria-current", String(b.dataset.agent === name));
  state.agent = name;
  const box = $("#agent-detail");
  if (!quiet) box.replaceChildren(el("p", { class: "muted" }, `Loading ${name}…`));
  try {
    const asked = get(`/v1/agents/${encodeURIComponent(name)}/prompt`)
      .then((r) => r.text)
      .catch((err) => `The prompt could not be assembled: ${err.message}`);
    const decl = await get(`/v1/agents/${encodeURIComponent(name)}`);
    const prompt = el("pre", { id: "agent-prompt", tabindex: "0", "aria-label": "Prompt as the model sees it" }, quiet ? await asked : "Loading the prompt…");
    if (state.agent !== name) return; // another agent was opened meanwhile
    asked.then((text) => (prompt.textContent = text));
    const why = (state.unavailable || new Map()).get(name);
    const skills = decl.skills === "all" ? ["every skill"] : asList(decl.skills).map((s) => `skill ${s}`);
    const tools = [
      ...asList(decl.tools),
      ...asList(decl.tool_categories).map((c) => `category ${c}`),
      ...asList(decl.connectors).map((c) => `connector ${c}`),
      ...asList(decl.mcp).map((m) => `mcp ${m}`),
      ...skills,
      ...asList(decl.workflows).map((w) => `workflow ${w}`),
      ...asList(decl.delegates).map((a) => `agent ${a}`),
    ];
    const chips = (items) => (items.length ? el("ul", { class: "chips" }, items.map((t) => el("li", {}, typeof t === "string" ? t : t.name || json(t)))) : el("span", { class: "muted" }, "none"));
    box.replaceChildren(
      el("h2", {}, decl.name),
      why ? el("div", { class: "unavailable-note", role: "alert" }, el("strong", {}, "Cannot run: "), why) : null,
      el("p", {}, decl.description || ""),
      el(
        "dl",
        {},
        el("dt", {}, "Model"), el("dd", { class: "mono" }, modelLabel(decl.model)),
        el("dt", {}, "Engine"), el("dd", {}, decl.engine || ""),
        el("dt", {}, "Tools"), el("dd", {}, chips(tools)),
        el("dt", {}, "Hooks"), el("dd", {}, chips(asList(decl.hooks).map(hookLabel))),
      ),
      el("div", { class: "toolbar" }, el("button", { type: "button", class: "primary", onclick: () => startChat(name) }, `Chat with ${name}`)),
      el("h3", {}, "Prompt as the model sees it (with token counts)"),
      prompt,
    );
  } catch (err) {
    if (state.agent !== name) return;
    const gone = err.status === 404 ? `${name} is no longer in the project.` : err.message;
    box.replaceChildren(el("p", { role: "alert" }, gone));
  }
}

// ------------------------------------------------------------------ events, as the chat and workflow logs show them

const DECISION = { allow: "allowed", block: "blocked", modify: "rewritten", context: "added context" };

function approvalButtons(id, after) {
  const decide = (decision) => async (e) => {
    const box = e.target.closest("div");
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    try {
      const result = await post(`/v1/approvals/${encodeURIComponent(id)}`, { decision, by: "dev page" });
      box.replaceChildren(el("span", { class: decision === "approve" ? "pass" : "failtxt" }, `${decision === "approve" ? "approved" : "denied"}`));
      loadApprovals();
      if (after) after(result);
    } catch (err) {
      box.append(` ${err.message}`);
    }
  };
  return el(
    "div",
    { class: "toolbar" },
    el("button", { type: "button", class: "primary approve", onclick: decide("approve") }, "Approve"),
    el("button", { type: "button", class: "deny", onclick: decide("deny") }, "Deny"),
  );
}

/** Where a project's tool or hook raised and its traceback (`at`, `traceback`), folded. */
const raisedBlock = (ev) => (ev.traceback || ev.at ? el("details", { class: "traceback" }, el("summary", {}, `traceback${ev.at ? ` · at ${ev.at}` : ""}`), ev.traceback ? el("pre", {}, ev.traceback) : null) : null);

function eventItem(ev, onResume) {
  const head = (kind, ...rest) =>
    el("div", { class: "head" }, el("span", { class: "kind" }, kind), ...rest.filter((r) => r !== "" && r !== null).map((r) => (r instanceof Node ? r : el("span", {}, r))));
  const item = (cls, ...children) => el("li", { class: `ev-${ev.type} ${cls || ""}`, "data-type": ev.type, "data-call": ev.call_id || null }, ...children);
  // which call a result or a hook decision is about (parallel calls of one tool look alike)
  const call = ev.call_id ? el("span", { class: "call mono" }, `id ${ev.call_id}`) : "";
  switch (ev.type) {
    case "run_started":
      return item("", head("run", `${ev.agent} · run ${ev.run_id} · snapshot ${(ev.snapshot_version || "").slice(0, 12)}`));
    case "llm_call": {
      const u = ev.usage || {};
      // what the call sent (the first call whole, a later one what it added) and got back
      const sent = ev.request || ev.response ? el("details", { class: "call-content" }, el("summary", {}, "Request / Response"), el("div", {}, ev.request && ev.request.since_call ? `Request (added since call #${ev.request.since_call})` : "Request"), el("pre", { class: "request" }, json(ev.request)), el("div", {}, "Response"), el("pre", { class: "response" }, json(ev.response))) : null;
      return item("", head("model call", `#${ev.iteration} · ${ev.model} · ${u.prompt_tokens} in / ${u.completion_tokens} out tokens${u.cost != null ? ` · ${money(u.cost)}` : ""} · ${ms(ev.duration_ms)}`), sent);
    }
    case "tool_call":
      return item("", head("tool call", el("strong", {}, ev.name), call), el("pre", {}, json(ev.arguments)));
    case "tool_result":
      return item(ev.is_error ? "fail" : "", head(ev.is_error ? "tool error" : "observation", el("strong", {}, ev.name), call, ms(ev.duration_ms)), ev.http ? el("div", { class: "http mono" }, `${ev.http.method} ${ev.http.url} → ${ev.http.status ?? "no response"}`) : null, el("pre", {}, ev.content), raisedBlock(ev));
    case "hook":
      return item(
        ev.decision,
        head("hook", el("strong", {}, ev.hook), ev.point, ev.tool_name ? `on ${ev.tool_name}` : "", call, el("span", { class: `decision ${ev.decision}` }, DECISION[ev.decision] || ev.decision)),
        ev.reason ? el("div", {}, ev.reason) : null,
        raisedBlock(ev),
      );
    case "notice": {
      const data = ev.data || {};
      return item("", head("notice", ev.message), data.approval_id ? approvalButtons(data.approval_id, onResume) : null);
    }
    case "error":
      return item("", head("error", ev.kind || ""), el("div", { role: "alert" }, ev.message));
    case "message": // the run's answer, as text (as the chat shows it), not its JSON
      return item("", head(ev.role === "assistant" ? "answer" : ev.role || "message"), el("div", { class: "text" }, ev.content ?? ""));
    case "run_finished": {
      const u = ev.usage || {};
      return item(ev.status === "ok" ? "" : "fail", head("finished", `${ev.status} · ${ev.iterations} iteration(s) · ${tokens(u)} tokens${u.cost != null ? ` · ${money(u.cost)}` : ""} · ${duration(ev.duration_ms)}`));
    }
    case "node_started":
      return item("", head("node", el("strong", {}, ev.node), `${ev.node_type} started`));
    case "node_finished":
      return item("", head("node", el("strong", {}, ev.node), `finished · ${ms(ev.duration_ms)}`), ev.output !== null && ev.output !== undefined ? el("pre", {}, typeof ev.output === "string" ? ev.output : json(ev.output)) : null);
    case "node_skipped":
      return item("", head("node", el("strong", {}, ev.node), `skipped ${ev.reason || ""}`));
    case "node_failed":
      return item("fail", head("node", el("strong", {}, ev.node), `failed (attempt ${ev.attempt})`), el("div", {}, ev.error));
    case "workflow_finished":
      return item(ev.status === "failed" ? "fail" : "", head("workflow", `${ev.workflow} ${ev.status} · ${ms(ev.duration_ms)}`), Object.keys(ev.outputs || {}).length ? el("pre", {}, json(ev.outputs)) : null);
    default:
      return item("", head(ev.type), el("pre", {}, json(ev)));
  }
}

// ------------------------------------------------------------------ chat

const newSession = () => `s-${crypto.getRandomValues(new Uint32Array(2)).join("").slice(0, 12)}`;

function startChat(name) {
  $("#chat-agent").value = name;
  $("#chat-session").value = newSession();
  $("#chat-log").replaceChildren();
  selectTab($("#tab-chat"), false);
  $("#chat-input").focus();
}

async function sendChat(e) {
  e.preventDefault();
  const input = $("#chat-input");
  const text = input.value.trim();
  const agent = $("#chat-agent").value;
  if (!text || !agent) return;
  if (!$("#chat-session").value) $("#chat-session").value = newSession();
  const log = $("#chat-log");
  log.append(el("li", { class: "ev-user" }, el("div", { class: "head" }, el("span", { class: "kind" }, "you")), text));
  input.value = "";
  const submit = $("#chat-submit");
  submit.disabled = true;
  let answer = null;
  try {
    const res = await post(`/v1/agents/${encodeURIComponent(agent)}/runs`, { input: text, session_id: $("#chat-session").value, stream: true });
    const answerItem = () => el("li", { class: "ev-assistant", "data-type": "assistant" }, el("div", { class: "head" }, el("span", { class: "kind" }, agent)), el("div", { class: "text" }));
    for await (const { data } of events(res)) {
      if (data.type === "token") {
        if (!answer) log.append((answer = answerItem()));
        answer.querySelector(".text").textContent += data.text;
      } else if (data.type === "message") {
        if (!answer) answer = answerItem();
        answer.querySelector(".text").textContent = data.content;
        // the answer goes where its `message` event is in the run, after the model call
        // that streamed it, as the Runs tab shows the run's events (newcomer-53 #12)
        log.append(answer);
        answer = null;
      } else {
        if (data.type === "tool_call") answer = null;
        log.append(eventItem(data));
      }
      log.lastElementChild.scrollIntoView({ block: "nearest" });
    }
  } catch (err) {
    showError(log, err);
  } finally {
    submit.disabled = false;
    loadSessions();
  }
}

/** The caller's earlier sessions, offered by the session box (most recent first). */
async function loadSessions() {
  try {
    const { sessions } = await get("/v1/sessions?limit=50");
    state.sessions = new Set(sessions.map((s) => s.session_id));
    $("#chat-sessions").replaceChildren(...sessions.map((s) => el("option", { value: s.session_id }, new Date(s.updated_at * 1000).toLocaleString())));
  } catch {
    state.sessions = new Set(); // an older server, or no key yet: the box still takes a name
  }
}

/** Show the conversation of the session in the box, when it is one of the caller's. */
async function openSession() {
  const id = $("#chat-session").value;
  const log = $("#chat-log");
  if (!state.sessions?.has(id)) return;
  try {
    const { messages } = await get(`/v1/sessions/${encodeURIComponent(id)}`);
    if ($("#chat-session").value !== id) return; // another session was chosen (or this one forgotten) meanwhile
    const agent = $("#chat-agent").value;
    log.replaceChildren(
      ...messages.flatMap((m) => {
        const head = (who) => el("div", { class: "head" }, el("span", { class: "kind" }, who));
        if (m.role === "user") return [el("li", { class: "ev-user", "data-type": "user" }, head("you"), m.content || "")];
        if (m.role === "tool") return [eventItem({ type: "tool_result", name: "", content: m.content || "" })];
        const calls = (m.tool_calls || []).map((c) => eventItem({ type: "tool_call", name: c.name, call_id: c.id, arguments: c.arguments }));
        const text = m.content ? [el("li", { class: "ev-assistant", "data-type": "assistant" }, head(agent), el("div", { class: "text" }, m.content))] : [];
        return [...text, ...calls];
      }),
    );
  } catch (err) {
    if ($("#chat-session").value === id) showError(log, err); // else: chosen away or forgotten meanwhile
  }
}

/** The Chat tab on session `id` with `agent` (a run's session, from the Runs tab). */
async function openChatSession(agent, id) {
  $("#chat-agent").value = agent;
  $("#chat-session").value = id;
  $("#chat-log").replaceChildren();
  selectTab($("#tab-chat"), false);
  await loadSessions();
  await openSession();
}

async function forgetSession() {
  const id = $("#chat-session").value;
  const log = $("#chat-log");
  try {
    if (state.sessions?.has(id)) await del(`/v1/sessions/${encodeURIComponent(id)}`);
    $("#chat-session").value = newSession();
    log.replaceChildren();
    await loadSessions();
  } catch (err) {
    showError(log, err);
  }
}

// ------------------------------------------------------------------ approvals

async function loadApprovals() {
  const list = $("#approval-list");
  try {
    const { approvals } = await get("/v1/approvals");
    const ids = approvals.map((a) => a.id).join(" ");
    if (ids === state.approvalIds && list.childElementCount) return; // keep focus where it is
    state.approvalIds = ids;
    state.approvals = approvals;
    const badge = $("#approval-count");
    badge.hidden = !approvals.length;
    badge.textContent = approvals.length;
    list.replaceChildren(
      ...(approvals.length
        ? approvals.map((a) =>
            el(
              "li",
              { "data-approval": a.id },
              el("div", { class: "head" }, el("strong", {}, a.kind === "workflow" ? `workflow ${a.data?.workflow || ""} · node ${a.tool_name}` : `${a.agent} · ${a.tool_name}`), el("span", { class: "muted" }, ` run ${a.run_id} · ${new Date(a.created_at * 1000).toLocaleTimeString()}`)),
              el("p", {}, a.reason),
              Object.keys(a.args || {}).length ? el("pre", {}, json(a.args)) : null,
              approvalButtons(a.id, (result) => result.resumed_run && followRun(result.resumed_run)),
            ),
          )
        : [el("li", { class: "muted" }, "Nothing waits for a decision.")]),
    );
  } catch (err) {
    list.replaceChildren(el("li", { role: "alert" }, err.message));
  }
}

// ------------------------------------------------------------------ runs

const GOING = ["queued", "running"];
const FAILED = ["error", "failed", "max_iterations"];

const httpUrl = (v) => (typeof v === "string" && /^https?:\/\//i.test(v) ? v : null);

/** What a run record says about the run, from its events (agent runs) or its state
 * (workflow runs): the fields a runs page shows. Fields the record lacks stay undefined
 * (a session or a trace id is shown when the record carries one). */
function runFacts(run) {
  const data = run.data || {};
  const evs = data.events || [];
  const started = evs.find((e) => e.type === "run_started") || {};
  const finished = evs.findLast((e) => e.type === "run_finished");
  const failure = evs.findLast((e) => e.type === "error");
  const failedNode = Object.entries(data.nodes || {}).find(([, n]) => n.status === "failed" && n.error);
  let error = null;
  if (failure) error = { kind: failure.kind || "error", message: failure.message || "" };
  else if (data.error) error = { kind: failedNode ? `node ${failedNode[0]}` : "workflow", message: String(data.error) };
  else if (failedNode) error = { kind: `node ${failedNode[0]}`, message: String(failedNode[1].error) };
  const traced = evs.find((e) => e.trace_id) || {};
  return {
    usage: finished?.usage || data.usage || null,
    calls: evs.filter((e) => e.type === "llm_call").length,
    tools: evs.filter((e) => e.type === "tool_call").length,
    duration: finished?.duration_ms ?? data.duration_ms ?? null,
    started: started.ts ?? data.started_at ?? run.created_at,
    input: started.input ?? (data.inputs && Object.keys(data.inputs).length ? json(data.inputs) : null),
    snapshot: started.snapshot_version || data.snapshot_version || data.snapshot || "",
    session: data.session_id ?? data.session ?? started.session_id ?? started.session ?? null,
    traceId: started.trace_id ?? data.trace_id ?? traced.trace_id ?? null,
    traceUrl: httpUrl(started.trace_url ?? data.trace_url ?? traced.trace_url),
    error: FAILED.includes(run.status) || error?.kind === "cancelled" ? error : null,
  };
}

/** One line for the runs list: the failure's kind, tokens, cost, duration. */
function factsLine(run, f) {
  if (GOING.includes(run.status)) return `${run.status}…`;
  const u = f.usage;
  return [f.error && f.error.kind, u && `${tokens(u)} tokens`, u && money(u.cost), duration(f.duration)].filter(Boolean).join(" · ");
}

const factsCache = new Map(); // run id → facts of a run that ended (they no longer change)

/** Fill in each listed run's facts from its record, a few requests at a time. */
async function fillFacts(list, runs) {
  const queue = [...runs];
  const worker = async () => {
    for (let r; (r = queue.shift()); ) {
      const slot = list.querySelector(`[data-run="${CSS.escape(r.id)}"] .facts`);
      if (!slot) continue;
      let facts = factsCache.get(`${r.id} ${r.updated_at}`);
      if (!facts) {
        try {
          facts = runFacts(await get(`/v1/runs/${encodeURIComponent(r.id)}`));
        } catch {
          continue; // the run is gone (or not readable): the line stays empty
        }
        if (!GOING.includes(r.status)) factsCache.set(`${r.id} ${r.updated_at}`, facts);
      }
      slot.textContent = factsLine(r, facts);
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
}

async function loadRuns() {
  const list = $("#run-list");
  try {
    const errors = $("#runs-errors") && $("#runs-errors").checked ? "&has_errors=true" : "";
    const { runs } = await get(`/v1/runs?limit=50${errors}`);
    state.runs = runs;
    list.replaceChildren(
      ...(runs.length
        ? runs.map((r) =>
            el(
              "li",
              {},
              el(
                "button",
                { type: "button", "data-run": r.id, "data-status": r.status, onclick: () => showRun(r.id) },
                `${r.name} · `,
                el("span", { class: FAILED.includes(r.status) ? "failtxt" : "" }, r.status),
                r.tool_errors ? el("span", { class: "badge", title: "tool errors" }, `${r.tool_errors} tool error${r.tool_errors === 1 ? "" : "s"}`) : null,
                r.hook_blocks ? el("span", { class: "badge", title: "calls a hook blocked" }, `${r.hook_blocks} blocked`) : null,
                r.input ? el("small", { class: "run-input" }, r.input) : null,
                el("small", {}, `${r.kind} ${r.id} · ${new Date(r.updated_at * 1000).toLocaleTimeString()}`),
                el("small", { class: "facts" }),
              ),
            ),
          )
        : [el("li", { class: "muted" }, "No runs yet.")]),
    );
    fillFacts(list, runs);
  } catch (err) {
    list.replaceChildren(el("li", { role: "alert" }, err.message));
  }
}

function copyButton(value, label) {
  const button = el("button", { type: "button", class: "small copy", "aria-label": `Copy ${label}` }, "Copy");
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(value);
      button.textContent = "Copied";
    } catch {
      button.textContent = "Select and copy";
    }
  });
  return button;
}

/** An agent run's actions: run it again on the current snapshot, compare it with another
 * run's events side by side, and the command that saves it as an eval case. */
function runActions(run) {
  const again = async (e) => {
    e.target.disabled = true;
    try {
      const done = await post(`/v1/runs/${encodeURIComponent(run.id)}/rerun`, {});
      await loadRuns();
      showRun(done.run_id);
    } catch (err) {
      await loadRuns(); // a failed run is recorded too: it is the newest in the list
      e.target.replaceWith(el("span", { role: "alert" }, err.message));
    }
  };
  const others = (state.runs || []).filter((r) => r.id !== run.id && r.kind === "agent");
  const pick = el("select", { id: "run-compare-with", "aria-label": "Run to compare with" }, others.map((r) => el("option", { value: r.id }, `${r.name} · ${r.id}${r.input ? ` · ${r.input}` : ""}`)));
  const same = others.find((r) => r.name === run.name);
  if (same) pick.value = same.id;
  const compare = async () => {
    const box = $("#run-compare");
    try {
      const [a, b] = await Promise.all([run.id, pick.value].map((id) => get(`/v1/runs/${encodeURIComponent(id)}`)));
      const side = (r) => el("div", {}, el("h3", {}, `${r.name} · ${r.id} · ${r.status}`), el("ol", { class: "log", "aria-label": `Events of ${r.id}` }, ...((r.data || {}).events || []).map((ev) => eventItem(ev))));
      box.replaceChildren(side(a), side(b));
    } catch (err) {
      box.replaceChildren(el("p", { role: "alert" }, err.message));
    }
  };
  const save = `fim runs save-case ${run.id}`;
  return el(
    "div",
    {},
    el(
      "div",
      { class: "toolbar" },
      el("button", { type: "button", id: "run-again", onclick: again }, "Run again"),
      others.length ? [pick, el("button", { type: "button", id: "run-compare-button", onclick: compare }, "Compare with…")] : null,
    ),
    el("p", { class: "muted" }, "Save as eval case: ", el("code", { id: "run-save-case" }, save), " ", copyButton(save, "command")),
    el("div", { id: "run-compare", class: "compare" }),
  );
}

async function showRun(id) {
  for (const b of document.querySelectorAll("[data-run]")) b.setAttribute("aria-current", String(b.dataset.run === id));
  const box = $("#run-detail");
  try {
    const run = await get(`/v1/runs/${encodeURIComponent(id)}`);
    const data = run.data || {};
    const f = runFacts(run);
    const nodes = Object.entries(data.nodes || {});
    const cancel = async (e) => {
      e.target.disabled = true;
      try {
        const done = await post(`/v1/runs/${encodeURIComponent(id)}/cancel`, null);
        e.target.replaceWith(el("span", { role: "status" }, done.status));
        setTimeout(() => showRun(id), 600);
      } catch (err) {
        e.target.replaceWith(el("span", { role: "alert" }, err.message));
      }
    };
    const u = f.usage;
    const row = (term, ...value) => [el("dt", {}, term), el("dd", {}, ...value)];
    const usage = u
      ? [
          `${tokens(u)} tokens (${u.prompt_tokens || 0} in / ${u.completion_tokens || 0} out${u.cached_tokens ? ` / ${u.cached_tokens} cached` : ""})`,
          ` · ${f.calls} model call${f.calls === 1 ? "" : "s"} · ${f.tools} tool call${f.tools === 1 ? "" : "s"}`,
        ].join("")
      : null;
    const trace = f.traceId
      ? [f.traceUrl ? el("a", { href: f.traceUrl, target: "_blank", rel: "noopener noreferrer", class: "mono" }, f.traceId) : el("span", { class: "mono" }, f.traceId), " ", copyButton(String(f.traceId), "trace id")]
      : null;
    const output = data.output && !(f.error && String(data.output).includes(f.error.message)) ? data.output : null;
    box.replaceChildren(
      ...[
        el("h2", {}, `${run.name} · ${run.status}`),
        f.error ? el("div", { class: "run-error", role: "alert" }, el("strong", { class: "kind" }, f.error.kind), " ", el("span", {}, f.error.message)) : null,
        el(
          "dl",
          { "aria-label": "Run" },
          ...row("run", el("span", { class: "mono" }, run.id), " ", copyButton(run.id, "run id")),
          ...row("kind", run.kind),
          ...row("started", new Date(f.started * 1000).toLocaleString()),
          ...(f.duration !== null ? row("duration", duration(f.duration)) : []),
          ...(usage ? row("usage", usage) : []),
          ...(u && (tokens(u) || u.cost) ? row("cost", u.cost === null || u.cost === undefined ? el("span", { class: "muted" }, "unknown (the model has no price)") : money(u.cost)) : []),
          ...(f.session ? row("session", el("span", { class: "mono", id: "run-session" }, String(f.session)), " ", run.kind === "agent" ? el("button", { type: "button", class: "small", id: "run-session-open", onclick: () => openChatSession(run.name, String(f.session)) }, "Open in Chat") : null) : []),
          ...(trace ? row("trace", ...trace) : []),
          ...(f.snapshot ? row("snapshot", el("span", { class: "mono" }, String(f.snapshot).slice(0, 12))) : []),
        ),
        GOING.includes(run.status) ? el("div", { class: "toolbar" }, el("button", { type: "button", id: "run-cancel", onclick: cancel }, "Cancel run")) : null,
        run.kind === "agent" && f.input !== null && f.input !== undefined ? runActions(run) : null,
        f.input ? el("h3", {}, "Input") : null,
        f.input ? el("pre", { "aria-label": "Input" }, f.input) : null,
        output ? el("h3", {}, "Output") : null,
        output ? el("pre", { "aria-label": "Output" }, output) : null,
        data.outputs && Object.keys(data.outputs).length ? el("h3", {}, "Outputs") : null,
        data.outputs && Object.keys(data.outputs).length ? el("pre", { "aria-label": "Outputs" }, json(data.outputs)) : null,
        nodes.length ? el("h3", {}, "Nodes") : null,
        nodes.length ? el("dl", { "aria-label": "Nodes" }, ...nodes.flatMap(([node, n]) => row(node, [n.status || "", n.duration_ms ? ` · ${duration(n.duration_ms)}` : "", n.error ? ` · ${n.error}` : ""].join("")))) : null,
        el("ol", { class: "log", "aria-label": "Events" }, ...(data.events || []).map((ev) => eventItem(ev))),
      ].filter(Boolean),
    );
  } catch (err) {
    box.replaceChildren(el("p", { role: "alert" }, err.message));
  }
}

// ------------------------------------------------------------------ workflows

async function openWorkflow(name, focus = true) {
  $("#wf-select").value = name;
  if (focus) selectTab($("#tab-workflows"), false);
  const graph = await get(`/v1/workflows/${encodeURIComponent(name)}/graph`);
  state.graph = graph;
  $("#wf-description").textContent = graph.description;
  const form = $("#wf-form");
  form.replaceChildren(
    ...Object.entries(graph.inputs).map(([key, spec]) => {
      const type = spec.type === "number" || spec.type === "integer" ? "number" : "text";
      const required = spec.required ?? spec.default === null;
      return el(
        "label",
        {},
        `${key}${spec.description ? ` — ${spec.description}` : ""}`,
        spec.type === "boolean"
          ? el("input", { type: "checkbox", name: key, checked: spec.default === true })
          : spec.type === "object" || spec.type === "array"
            ? el("textarea", { name: key, rows: 2, "data-json": true, placeholder: "JSON", required }, spec.default !== null ? json(spec.default) : "")
            : el("input", { type, step: type === "number" ? "any" : null, name: key, value: spec.default ?? "", required, "data-type": spec.type }),
      );
    }),
    el("button", { type: "submit", id: "wf-run" }, "Run workflow"),
  );
  drawGraph(graph, {});
  $("#wf-log").replaceChildren();
  $("#wf-status").textContent = "";
}

function formInputs(form) {
  const inputs = {};
  for (const field of form.querySelectorAll("[name]")) {
    if (field.type === "checkbox") inputs[field.name] = field.checked;
    else if (field.value === "") continue;
    else if (field.dataset.json !== undefined) inputs[field.name] = JSON.parse(field.value);
    else if (field.type === "number") inputs[field.name] = Number(field.value);
    else inputs[field.name] = field.value;
  }
  return inputs;
}

const STATE_OF = { node_started: "running", node_finished: "ok", node_skipped: "skipped", node_failed: "failed" };

function drawGraph(graph, states) {
  const W = 170, H = 46, GX = 70, GY = 26, PAD = 16;
  const layers = {};
  const pos = {};
  for (const n of graph.nodes) {
    const row = (layers[n.layer] = (layers[n.layer] || 0) + 1) - 1;
    pos[n.id] = { x: PAD + n.layer * (W + GX), y: PAD + row * (H + GY) };
  }
  const width = PAD * 2 + (Math.max(0, ...graph.nodes.map((n) => n.layer)) + 1) * (W + GX) - GX;
  const height = PAD * 2 + Math.max(1, ...Object.values(layers)) * (H + GY) - GY;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  const title = svg("title");
  title.textContent = `Workflow ${graph.workflow}`;
  root.append(title);
  const defs = svg("defs");
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
  marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z" }));
  defs.append(marker);
  root.append(defs);
  for (const e of graph.edges) {
    const a = pos[e.source], b = pos[e.target];
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const mid = (x1 + x2) / 2;
    root.append(svg("path", { class: "edge", d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`, "marker-end": "url(#arrow)" }));
    if (e.label !== "needs") {
      const label = svg("text", { class: "edge-label", x: mid - 10, y: (y1 + y2) / 2 - 4 });
      label.textContent = e.label;
      root.append(label);
    }
  }
  for (const n of graph.nodes) {
    const p = pos[n.id];
    const status = states[n.id] || "pending";
    const g = svg("g", { class: `node ${status}`, "data-node": n.id, "data-state": status, transform: `translate(${p.x} ${p.y})` });
    g.append(svg("rect", { width: W, height: H, rx: 8 }));
    const name = svg("text", { x: 10, y: 19 });
    name.textContent = n.id;
    const type = svg("text", { class: "type", x: 10, y: 36 });
    type.textContent = `${n.type} · ${status}`;
    g.append(name, type);
    root.append(g);
  }
  $("#wf-graph").replaceChildren(root);
  $("#wf-graph").setAttribute("aria-label", `Workflow ${graph.workflow}: ${graph.nodes.map((n) => `${n.id} ${states[n.id] || "pending"}`).join(", ")}`);
}

async function runWorkflow(e) {
  e.preventDefault();
  const graph = state.graph;
  const log = $("#wf-log");
  log.replaceChildren();
  const states = {};
  drawGraph(graph, states);
  let inputs;
  try {
    inputs = formInputs($("#wf-form"));
  } catch (err) {
    showError(log, new Error(`an input is not valid JSON: ${err.message}`));
    return;
  }
  $("#wf-run").disabled = true;
  $("#wf-status").textContent = "running…";
  try {
    const res = await post(`/v1/workflows/${encodeURIComponent(graph.workflow)}/runs`, { inputs, stream: true });
    for await (const { data } of events(res)) {
      if (STATE_OF[data.type]) states[data.node] = STATE_OF[data.type];
      if (data.type === "notice" && data.data?.approval_id && data.data?.node) states[data.data.node] = "waiting";
      if (data.run_id) state.wfRun = data.run_id;
      if (data.type === "workflow_finished") $("#wf-status").textContent = `run ${data.run_id}: ${data.status}`;
      drawGraph(graph, states);
      log.append(eventItem(data, (result) => result.resumed_run && followRun(result.resumed_run)));
    }
  } catch (err) {
    showError(log, err);
    $("#wf-status").textContent = "";
  } finally {
    $("#wf-run").disabled = false;
  }
  loadApprovals();
}

/** A resumed run goes on in the background: follow its node states in GET /v1/runs/{id}. */
async function followRun(runId) {
  $("#wf-status").textContent = `run ${runId}: resumed…`;
  for (let i = 0; i < 600; i++) {
    let record;
    try {
      record = await get(`/v1/runs/${encodeURIComponent(runId)}`);
    } catch (err) {
      $("#wf-status").textContent = err.message;
      return;
    }
    const data = record.data || {};
    const states = Object.fromEntries(Object.entries(data.nodes || {}).map(([id, n]) => [id, n.status]));
    if (state.graph && data.workflow === state.graph.workflow) drawGraph(state.graph, states);
    $("#wf-status").textContent = `run ${runId}: ${record.status}`;
    if (!["running", "paused"].includes(record.status) || (record.status === "paused" && i > 75)) {
      if (data.outputs && Object.keys(data.outputs).length) $("#wf-log").append(eventItem({ type: "workflow_finished", workflow: record.name, status: record.status, outputs: data.outputs }));
      return;
    }
    await new Promise((r) => setTimeout(r, 400));
  }
}

// ------------------------------------------------------------------ evals

async function loadEvals() {
  const { suites } = await get("/v1/evals");
  $("#eval-suite").replaceChildren(...suites.map((s) => el("option", { value: s.name }, `${s.name} (${s.agent || s.workflow}, ${s.cases.length} case${s.cases.length === 1 ? "" : "s"})`)));
}

async function runEval(e) {
  e.preventDefault();
  const suite = $("#eval-suite").value;
  const box = $("#eval-result");
  box.replaceChildren(el("p", { role: "status" }, `Running ${suite}…`));
  $("#eval-run").disabled = true;
  try {
    const report = await post(`/v1/evals/${encodeURIComponent(suite)}/runs`, { mode: $("#eval-mode").value });
    box.replaceChildren(
      ...report.suites.map((s) =>
        el(
          "div",
          {},
          el("h2", {}, `${s.name}: `, el("span", { class: s.passed ? "pass" : "failtxt" }, s.skipped ? "skipped" : s.passed ? "passed" : "failed"), el("span", { class: "muted" }, ` · pass rate ${Math.round(s.pass_rate * 100)}% (needs ${Math.round(s.threshold * 100)}%) · ${report.mode} · ${report.duration_s}s · hooks ${s.hooks}`)),
          el(
            "table",
            {},
            el("thead", {}, el("tr", {}, el("th", {}, "Case"), el("th", {}, "Result"), el("th", {}, "Details"))),
            el(
              "tbody",
              {},
              s.cases.map((c) => {
                const failing = (c.assertions || []).filter((a) => !a.passed);
                const verdict = c.skipped ? "skipped" : c.passed ? "pass" : "fail";
                return el(
                  "tr",
                  { "data-case": c.case },
                  el("td", {}, c.case, c.attempt > 1 ? ` #${c.attempt}` : ""),
                  el("td", { class: verdict === "pass" ? "pass" : verdict === "fail" ? "failtxt" : "muted" }, verdict),
                  el(
                    "td",
                    {},
                    c.skipped ? el("div", {}, c.skipped) : null,
                    c.error ? el("div", { class: "failtxt" }, c.error) : null,
                    failing.map((a) => el("div", { class: "failtxt" }, `${a.kind}: ${a.message}`)),
                    el("div", { class: "muted" }, `${c.iterations} iteration(s) · ${c.tokens} tokens · ${ms(c.latency_ms)}`),
                    el("details", {}, el("summary", {}, `Assertions and trace (${(c.trace || []).length} events)`), el("ul", {}, (c.assertions || []).map((a) => el("li", { class: a.passed ? "" : "failtxt" }, `${a.passed ? "✓" : "✗"} ${a.kind}: ${a.message}`))), el("ol", { class: "log" }, (c.trace || []).filter((t) => t.type !== "token").map((t) => eventItem(t)))),
                  ),
                );
              }),
            ),
          ),
        ),
      ),
    );
  } catch (err) {
    box.replaceChildren(el("p", { role: "alert" }, err.message));
  } finally {
    $("#eval-run").disabled = false;
  }
}

// ------------------------------------------------------------------ start

function start() {
  setupTabs();
  $("#key-button").addEventListener("click", () => askKey().then((ok) => ok && boot()));
  $("#chat-send").addEventListener("submit", sendChat);
  $("#chat-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("#chat-send").requestSubmit();
    }
  });
  $("#chat-new").addEventListener("click", () => {
    $("#chat-session").value = newSession();
    $("#chat-log").replaceChildren();
  });
  $("#chat-session").addEventListener("change", openSession);
  $("#chat-forget").addEventListener("click", forgetSession);
  $("#chat-form").addEventListener("submit", (e) => e.preventDefault());
  $("#chat-session").value = newSession();
  $("#approvals-refresh").addEventListener("click", loadApprovals);
  $("#runs-refresh").addEventListener("click", loadRuns);
  $("#runs-errors").addEventListener("change", loadRuns);
  $("#wf-select").addEventListener("change", (e) => openWorkflow(e.target.value, false));
  $("#wf-form").addEventListener("submit", runWorkflow);
  $("#eval-form").addEventListener("submit", runEval);
  boot();
  watchStatus();
  setInterval(() => document.visibilityState === "visible" && loadApprovals(), 3000);
}

let booted = null;
async function boot() {
  try {
    await loadCatalogue();
    await loadEvals();
    loadApprovals();
    loadSessions();
    if (!booted && state.agents.length) showAgent(state.agents[0].name);
    booted = true;
    document.body.dataset.ready = "true";
  } catch (err) {
    $("#agent-detail").replaceChildren(el("p", { role: "alert" }, err.message));
  }
}

start();
