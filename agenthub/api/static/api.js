// The console's API client: bearer-token fetch, JSON errors, and a POST-capable SSE reader for chat streams.

import { locale } from "/static/i18n.js";

const TOKEN_KEY = "agenthub.token";

export class AuthError extends Error {}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const token = {
  get: () => localStorage.getItem(TOKEN_KEY),
  set: (value) => localStorage.setItem(TOKEN_KEY, value),
  clear: () => localStorage.removeItem(TOKEN_KEY),
};

async function errorOf(response) {
  let code = "http_" + response.status;
  let message = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, code, message);
}

/** fetch() an /api/ path with the token; throws AuthError on 401 and ApiError on any other failure. */
export async function request(path, { method = "GET", body, signal, accept } = {}) {
  const headers = { Authorization: `Bearer ${token.get() || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (accept) headers.Accept = accept;
  headers["Accept-Language"] = locale; // replies follow the console's language where none is configured
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (response.status === 401) throw new AuthError("unauthorized");
  if (!response.ok) throw await errorOf(response);
  return response;
}

export async function json(path, options) {
  const response = await request(path, options);
  return response.status === 204 ? null : response.json();
}

/** Split an SSE byte stream into {event, data} frames; `data` is parsed JSON (or the raw string). */
export async function* sseFrames(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = parseFrame(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (frame) yield frame;
      }
    }
    const tail = parseFrame(buffer + decoder.decode());
    if (tail) yield tail;
  } finally {
    reader.releaseLock();
  }
}

function parseFrame(text) {
  let event = "message";
  const data = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  const raw = data.join("\n");
  try {
    return { event, data: JSON.parse(raw) };
  } catch {
    return { event, data: raw };
  }
}

const enc = encodeURIComponent;

/** The routes of design §9, one function each. */
export const api = {
  agents: () => json("/api/agents"),
  sessions: (agent) => json(`/api/agents/${enc(agent)}/sessions`),
  createSession: (agent) => json(`/api/agents/${enc(agent)}/sessions`, { method: "POST", body: {} }),
  messages: (agent, chat) => json(`/api/agents/${enc(agent)}/sessions/${enc(chat)}/messages`),
  remove: (agent, chat) => json(`/api/agents/${enc(agent)}/sessions/${enc(chat)}`, { method: "DELETE" }),
  rename: (agent, chat, title) =>
    json(`/api/agents/${enc(agent)}/sessions/${enc(chat)}`, { method: "PATCH", body: { title } }),
  pin: (agent, chat, pinned) =>
    json(`/api/agents/${enc(agent)}/sessions/${enc(chat)}/pin`, { method: "POST", body: { pinned } }),
  autoTitle: (agent, chat) => json(`/api/agents/${enc(agent)}/sessions/${enc(chat)}/auto-title`, { method: "POST" }),
  context: (agent, chat) => json(`/api/agents/${enc(agent)}/sessions/${enc(chat)}/context`),
  compact: (agent, chat) => json(`/api/agents/${enc(agent)}/sessions/${enc(chat)}/compact`, { method: "POST" }),
  welcome: (agent) => json(`/api/agents/${enc(agent)}/welcome`),
  usage: (by, period) => json(`/api/usage?by=${enc(by)}&period=${enc(period)}`),
  events: (agent, chat, signal) =>
    request(`/api/agents/${enc(agent)}/sessions/${enc(chat)}/events`, { signal, accept: "text/event-stream" }),
  send: (agent, chat, content) =>
    json(`/api/agents/${enc(agent)}/chat`, { method: "POST", body: { chat_id: chat, content } }),
  stream: (agent, chat, content, signal) =>
    request(`/api/agents/${enc(agent)}/chat?stream=1`, {
      method: "POST",
      body: { chat_id: chat, content },
      signal,
      accept: "text/event-stream",
    }),
};
