// AgentHub web console: sign-in, agent picker, session list (pin/rename/delete), streaming chat, context meter.

import { api, ApiError, AuthError, sseFrames, token } from "/static/api.js";
import { localisePage, rememberedLanguage, switchLanguage, t } from "/static/i18n.js";
import { initUsage } from "/static/usage.js";
import { el, formatText, messageRow, meterOf, relativeTime, welcomeCard } from "/static/render.js";

const DEFAULT_TITLE = "新会话"; // the server's title of a new session (data, not a console text)
/** A session's title as shown: the server's untitled default in the console's language. */
const titleOf = (meta) => (meta.title === DEFAULT_TITLE ? t("session.untitled") : meta.title);
const AGENT_KEY = "agenthub.agent";
const $ = (id) => document.getElementById(id);

const state = {
  agents: [],
  agent: null,
  sessions: [],
  chat: null,
  view: 0, // bumped on every chat switch so late answers for an old view are dropped
  streams: new Map(), // "agent\nchat" → {row, controller}
  feed: null, // AbortController of the open chat's events feed (reminders pushed by the daemon)
  welcome: new Map(),
  loading: new Map(), // view → loads in flight for it (a chat being made, its history): its composer waits (a late
  // history would wipe a reply); a load for a view no longer shown holds nothing
};

const streamKey = (agent, chat) => `${agent}\n${chat}`;
const currentStream = () => state.chat && state.streams.get(streamKey(state.agent, state.chat));
const metaOf = (chat) => state.sessions.find((s) => s.chat_id === chat);

// ---- errors and sign-in -------------------------------------------------------------------------------------

function showError(message) {
  const banner = $("error-banner");
  banner.textContent = message;
  banner.hidden = !message;
}

function handleError(error) {
  if (error instanceof AuthError) return showSignIn(t("signin.invalid"));
  if (error && error.name === "AbortError") return;
  console.error(error);
  showError(error && error.message ? error.message : String(error));
}

async function guard(action) {
  try {
    return await action();
  } catch (error) {
    handleError(error);
    return undefined;
  }
}

function showSignIn(message = "") {
  token.clear();
  for (const { controller } of state.streams.values()) controller.abort();
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $("signin-error").hidden = !message;
  $("signin-token").value = "";
  $("signin-token").focus();
}

async function signIn(event) {
  event.preventDefault();
  const value = $("signin-token").value.trim();
  if (!value) return;
  token.set(value);
  await guard(boot);
}

// ---- agents and sessions -------------------------------------------------------------------------------------

async function boot() {
  const data = await api.agents();
  state.agents = data.agents;
  $("signin").hidden = true;
  $("app").hidden = false;
  $("offline-banner").hidden = !data.offline;
  showError("");
  const select = $("agent-select");
  select.replaceChildren(...state.agents.map((a) => el("option", { value: a.name, text: a.name })));
  $("agent-picker").hidden = state.agents.length < 2;
  const remembered = localStorage.getItem(AGENT_KEY);
  const first = state.agents.some((a) => a.name === remembered) ? remembered : state.agents[0]?.name;
  if (first) await selectAgent(first);
}

async function selectAgent(name) {
  state.agent = name;
  localStorage.setItem(AGENT_KEY, name);
  $("agent-select").value = name;
  const agent = state.agents.find((a) => a.name === name);
  $("agent-info").textContent = agent ? [agent.description, agent.model].filter(Boolean).join(" · ") : "";
  await loadSessions();
  if (state.sessions.length) await openChat(state.sessions[0].chat_id);
  else showNoChat();
}

async function loadSessions() {
  const agent = state.agent;
  const data = await api.sessions(agent);
  if (agent !== state.agent) return;
  state.sessions = data.sessions;
  renderSessions();
}

function sessionItem(meta) {
  const active = meta.chat_id === state.chat;
  const open = el(
    "button",
    { class: "session-open", type: "button", "aria-current": active ? "true" : null, title: titleOf(meta) },
    el(
      "span",
      { class: "session-title" },
      meta.pinned ? el("span", { class: "pin-badge", text: t("session.pinned") }) : null,
      el("span", { class: "session-name", text: titleOf(meta) }),
    ),
    el("span", { class: "session-time", text: relativeTime(meta.updated_at) }),
  );
  open.addEventListener("click", () => guard(() => openChat(meta.chat_id)));
  const action = (label, symbol, handler) =>
    el("button", { class: "icon", type: "button", "aria-label": label, title: label, text: symbol, onclick: handler });
  const item = el(
    "li",
    { class: `session${active ? " active" : ""}${meta.pinned ? " pinned" : ""}`, "data-chat-id": meta.chat_id },
    open,
    el(
      "span",
      { class: "session-actions" },
      action(t(meta.pinned ? "session.unpin" : "session.pin"), meta.pinned ? "★" : "☆", () => guard(() => togglePin(meta))),
      action(t("session.rename"), "✎", () => startRename(item, meta)),
      action(t("session.delete"), "✕", () => guard(() => removeSession(meta))),
    ),
  );
  return item;
}

function renderSessions() {
  $("session-list").replaceChildren(...state.sessions.map(sessionItem));
  $("session-empty").hidden = state.sessions.length > 0;
  const meta = metaOf(state.chat);
  if (meta) $("chat-title").textContent = titleOf(meta);
}

async function togglePin(meta) {
  await api.pin(state.agent, meta.chat_id, !meta.pinned);
  await loadSessions();
}

function startRename(item, meta) {
  const input = el("input", { class: "session-rename", "aria-label": t("session.title"), maxlength: 200 });
  input.value = meta.title;
  let settled = false;
  const finish = async (save) => {
    if (settled) return;
    settled = true;
    const title = input.value.trim();
    if (save && title && title !== meta.title) await guard(() => api.rename(state.agent, meta.chat_id, title));
    await guard(loadSessions);
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.isComposing) finish(true);
    else if (event.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
  item.replaceChildren(input);
  input.focus();
  input.select();
}

async function removeSession(meta) {
  if (!window.confirm(t("session.delete_confirm", { title: titleOf(meta) }))) return;
  await api.remove(state.agent, meta.chat_id);
  if (meta.chat_id === state.chat) state.chat = null;
  await loadSessions();
  if (!state.chat) {
    if (state.sessions.length) await openChat(state.sessions[0].chat_id);
    else showNoChat();
  }
}

async function newChat() {
  await loading(async () => {
    const meta = await api.createSession(state.agent);
    await loadSessions();
    await openChat(meta.chat_id);
  });
  $("input").focus();
}

/** Run `action` with the composer held: nothing is sent into a chat whose history has not arrived yet. */
async function loading(action) {
  const view = state.view;
  state.loading.set(view, (state.loading.get(view) ?? 0) + 1);
  updateComposer();
  try {
    return await action();
  } finally {
    const left = state.loading.get(view) - 1;
    if (left > 0) state.loading.set(view, left);
    else state.loading.delete(view);
    updateComposer();
  }
}

const isLoading = () => state.loading.has(state.view);

// ---- the chat view -----------------------------------------------------------------------------------------

function showNoChat() {
  state.chat = null;
  state.view += 1;
  followPushes(null, null, state.view);
  $("chat-title").textContent = t("chat.pick");
  $("context-meter").hidden = true;
  $("messages").replaceChildren(el("div", { class: "welcome", text: t("chat.start") }));
  renderSessions();
  updateComposer();
}

async function openChat(chat) {
  const view = ++state.view;
  showError("");
  const agent = state.agent;
  state.chat = chat;
  renderSessions();
  updateComposer();
  const data = await loading(() => api.messages(agent, chat));
  if (view !== state.view) return;
  const rows = data.messages.map(messageRow).filter(Boolean);
  const live = state.streams.get(streamKey(agent, chat));
  if (live) rows.push(live.row);
  $("messages").replaceChildren(...rows);
  if (!rows.length) showWelcome(agent, view);
  scrollToEnd();
  refreshMeter();
  followPushes(agent, chat, view);
}

/** While a chat is open, messages the daemon pushes into it (scheduled reminders) appear as they come. */
async function followPushes(agent, chat, view) {
  state.feed?.abort();
  state.feed = null;
  if (!chat) return;
  const controller = new AbortController();
  state.feed = controller;
  try {
    const response = await api.events(agent, chat, controller.signal);
    for await (const frame of sseFrames(response)) {
      if (view !== state.view) break;
      if (frame.event !== "push") continue;
      $("messages").querySelector(".welcome")?.remove();
      const row = messageRow({ role: "assistant", content: frame.data.content });
      if (row) $("messages").append(row);
      scrollToEnd();
    }
  } catch {
    // aborted on a chat switch, or the feed is gone: the messages route still shows every push on reopening
  } finally {
    if (state.feed === controller) state.feed = null;
  }
}

async function showWelcome(agent, view) {
  const box = el("div", { class: "welcome", "data-testid": "welcome", text: "…" });
  $("messages").replaceChildren(box);
  let text = state.welcome.get(agent);
  if (text === undefined) {
    try {
      text = (await api.welcome(agent)).text;
      state.welcome.set(agent, text);
    } catch (error) {
      if (error instanceof AuthError) return handleError(error);
      text = t("welcome.fallback", { agent });
    }
  }
  if (view === state.view && box.isConnected) box.replaceWith(welcomeCard(agent, text));
}

async function refreshMeter() {
  const agent = state.agent;
  const chat = state.chat;
  if (!chat) return;
  const context = await guard(() => api.context(agent, chat));
  if (!context || chat !== state.chat) return;
  const { percent, label, tip, level } = meterOf(context);
  $("context-meter").hidden = false;
  $("context-meter").title = tip;
  $("meter-fill").style.width = `${Math.max(percent, 1)}%`;
  $("meter-fill").className = `meter-fill ${level}`;
  $("meter-bar").setAttribute("aria-valuenow", String(percent));
  $("meter-text").textContent = label;
}

function scrollToEnd() {
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

function updateComposer() {
  const busy = Boolean(currentStream());
  $("input").disabled = !state.agent || isLoading();
  $("send").disabled = !state.agent || busy || isLoading();
  $("stop").hidden = !busy;
}

function notice(text) {
  $("messages").append(el("div", { class: "notice", role: "status", text }));
  scrollToEnd();
}

// ---- sending and streaming -----------------------------------------------------------------------------------

async function send(event) {
  event?.preventDefault();
  const input = $("input");
  const content = input.value.trim();
  if (!content || !state.agent || isLoading() || currentStream()) return;
  if (!state.chat) await newChat();
  const agent = state.agent;
  const chat = state.chat;
  const firstExchange = metaOf(chat)?.title === DEFAULT_TITLE;
  input.value = "";
  autoGrow();
  $("messages").querySelectorAll(".welcome").forEach((node) => node.remove());
  $("messages").append(messageRow({ role: "user", content }));
  await streamReply(agent, chat, content);
  if (firstExchange) await guard(() => titleAfterFirstExchange(agent, chat));
  if (agent === state.agent) await guard(loadSessions);
  if (chat === state.chat) refreshMeter();
}

/** Ask for the chat's title after its first exchange; one that stored nothing (a command such as /help) has none
 * to make yet, which is no error. */
async function titleAfterFirstExchange(agent, chat) {
  try {
    await api.autoTitle(agent, chat);
  } catch (error) {
    if (!(error instanceof ApiError && error.code === "session_empty")) throw error;
  }
}

async function streamReply(agent, chat, content) {
  const live = el("div", { class: "text caret" });
  const status = el("div", { class: "tool-chip", hidden: true });
  const bubble = el("div", { class: "bubble", "data-role": "assistant", "data-state": "streaming" }, status, live);
  const row = el("div", { class: "msg assistant" }, bubble);
  const controller = new AbortController();
  const key = streamKey(agent, chat);
  state.streams.set(key, { row, controller });
  $("messages").append(row);
  scrollToEnd();
  updateComposer();
  let text = "";
  try {
    const response = await api.stream(agent, chat, content, controller.signal);
    for await (const { event, data } of sseFrames(response)) {
      if (event === "delta") {
        text += data.text;
        live.textContent = text;
        if (row.isConnected) scrollToEnd();
      } else if (event === "tool") {
        status.hidden = false;
        const done = t(data.is_error ? "tool.error" : "tool.done");
        const name = data.name;
        status.textContent = data.phase === "start" ? t("tool.running", { name }) : t("tool.finished", { name, done });
      } else if (event === "notice") {
        bubble.before(el("div", { class: "notice", text: data.text }));
      } else if (event === "done") {
        bubble.replaceChildren(formatText(data.full_text));
        bubble.dataset.state = "done";
        return;
      } else if (event === "error") {
        throw new ApiError(0, data.code || "error", data.message || t("reply.failed"));
      }
    }
    throw new ApiError(0, "incomplete", t("reply.incomplete"));
  } catch (error) {
    if (error instanceof AuthError) return handleError(error);
    const stopped = error.name === "AbortError" || (error instanceof ApiError && error.code === "stopped");
    live.classList.remove("caret");
    bubble.dataset.state = stopped ? "stopped" : "error";
    bubble.append(el("div", { class: "notice", text: stopped ? t("reply.stopped") : t("reply.error", { message: error.message }) }));
  } finally {
    state.streams.delete(key);
    if (chat === state.chat) updateComposer();
  }
}

async function stop() {
  const live = currentStream();
  if (!live) return;
  const result = await guard(() => api.send(state.agent, state.chat, "/stop"));
  if (!result) live.controller.abort();
}

async function compact() {
  if (!state.chat || !window.confirm(t("compact.confirm"))) return;
  try {
    const result = await api.compact(state.agent, state.chat);
    await openChat(state.chat);
    notice(t("compact.result", { result: result.result, before: result.messages_before, after: result.messages_after }));
  } catch (error) {
    if (error instanceof ApiError && error.status === 409) notice(t("compact.busy"));
    else handleError(error);
  }
}

function autoGrow() {
  const input = $("input");
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
}

function onKey(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
    event.preventDefault();
    guard(send);
  }
}

// ---- wiring --------------------------------------------------------------------------------------------------

function init() {
  const remembered = rememberedLanguage();
  if (remembered) return location.replace(remembered);
  localisePage();
  $("signin-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => showSignIn());
  $("lang-switch").addEventListener("click", () => switchLanguage());
  $("error-banner").addEventListener("click", () => showError(""));
  $("agent-select").addEventListener("change", (e) => guard(() => selectAgent(e.target.value)));
  $("new-chat").addEventListener("click", () => guard(newChat));
  $("composer").addEventListener("submit", (e) => guard(() => send(e)));
  $("input").addEventListener("keydown", onKey);
  $("input").addEventListener("input", autoGrow);
  $("stop").addEventListener("click", () => guard(stop));
  $("compact").addEventListener("click", () => guard(compact));
  initUsage(guard);
  if (token.get()) guard(boot);
  else showSignIn();
}

init();
