// Safe rendering for the console: text becomes DOM nodes (never innerHTML), with code blocks and inline code.

import { t } from "/static/i18n.js";

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

/** Inline `code` and **bold** inside a plain-text run; everything else stays text (line breaks via CSS). */
function inline(text) {
  const out = [];
  const pattern = /`([^`\n]+)`|\*\*([^*\n]+)\*\*/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > last) out.push(document.createTextNode(text.slice(last, match.index)));
    out.push(match[1] !== undefined ? el("code", { text: match[1] }) : el("strong", { text: match[2] }));
    last = match.index + match[0].length;
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

/** Minimal, safe formatting: ```fenced``` blocks become <pre><code>, the rest keeps its line breaks. */
export function formatText(text) {
  const box = el("div", { class: "text" });
  const parts = String(text).split(/```/);
  parts.forEach((part, i) => {
    if (i % 2 === 1) {
      const newline = part.indexOf("\n");
      const lang = newline > 0 ? part.slice(0, newline).trim() : "";
      const body = newline >= 0 && /^[\w+#.-]*$/.test(lang) ? part.slice(newline + 1) : part;
      box.append(el("pre", {}, el("code", { text: body.replace(/\n$/, ""), "data-lang": lang || null })));
    } else {
      const trimmed = i > 0 ? part.replace(/^\n/, "") : part;
      const chunk = i < parts.length - 1 ? trimmed.replace(/\n$/, "") : trimmed;
      if (chunk) box.append(...inline(chunk));
    }
  });
  return box;
}

function short(value, limit = 120) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > limit ? text.slice(0, limit) + "…" : text;
}

function resultText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((b) => (b && b.type === "text" ? b.text : "")).join(" ");
  return "";
}

/** Content (a string or Anthropic blocks) as nodes: text formatted, tool_use/tool_result as compact chips. */
export function renderContent(content) {
  if (typeof content === "string") return [formatText(content)];
  const nodes = [];
  for (const block of Array.isArray(content) ? content : []) {
    if (!block || typeof block !== "object") continue;
    if (block.type === "text" && block.text) nodes.push(formatText(block.text));
    else if (block.type === "tool_use") {
      nodes.push(el("div", { class: "tool-chip", text: t("tool.chip", { name: block.name, input: short(block.input ?? {}, 80) }) }));
    } else if (block.type === "tool_result") {
      const mark = block.is_error ? t("tool.result_error") : "↳";
      nodes.push(el("div", { class: "tool-chip", text: `${mark} ${short(resultText(block.content))}` }));
    }
  }
  return nodes;
}

function summaryText(content) {
  const text = typeof content === "string" ? content : resultText(content);
  return text.replace(/^\s*\[历史摘要\]\s*/, "");
}

/** One history message as a row; `system` messages are the collapsed `[历史摘要]` summary. */
export function messageRow(message) {
  if (message.role === "system") {
    return el(
      "details",
      { class: "summary" },
      el("summary", { text: t("summary") }),
      formatText(summaryText(message.content)),
    );
  }
  const role = message.role === "user" ? "user" : "assistant";
  const nodes = renderContent(message.content);
  if (!nodes.length) return null;
  return el("div", { class: `msg ${role}` }, el("div", { class: "bubble", "data-role": role }, ...nodes));
}

export function welcomeCard(agentName, text) {
  return el("div", { class: "welcome", "data-testid": "welcome" }, el("strong", { text: agentName }), text);
}

export function relativeTime(ms) {
  if (!ms) return "";
  const seconds = Math.max(0, (Date.now() - ms) / 1000);
  if (seconds < 60) return t("time.now");
  if (seconds < 3600) return t("time.minutes", { n: Math.floor(seconds / 60) });
  if (seconds < 86400) return t("time.hours", { n: Math.floor(seconds / 3600) });
  const date = new Date(ms);
  return t("time.date", { month: date.getMonth() + 1, day: date.getDate() });
}

function kilo(n) {
  return n >= 1000 ? `${(n / 1000).toFixed(n >= 10000 ? 0 : 1)}k` : String(n);
}

/** {percent, label, level} for the context meter: the last real prompt size, else the estimate. */
export function meterOf(context) {
  const usage = context.last_usage;
  const real = usage
    ? (usage.input_tokens || 0) + (usage.cache_read_input_tokens || 0) + (usage.cache_creation_input_tokens || 0)
    : 0;
  const used = real || (context.messages ? context.estimated_tokens || 0 : 0);
  const limits = context.thresholds || {};
  const limit = limits.consolidate_at_tokens || limits.context_window || 80000;
  const percent = Math.min(100, Math.round((used / limit) * 100));
  const window = limits.context_window ? t("meter.window", { window: kilo(limits.context_window) }) : "";
  const label = `${kilo(used)} / ${kilo(limit)} tokens${real ? "" : t("meter.estimated")}${window}`;
  const tip = t("meter.tip", { messages: context.messages, limit: kilo(limit) }) +
    (context.has_summary ? t("meter.has_summary") : "");
  return { percent, label, tip, level: percent >= 90 ? "high" : percent >= 70 ? "warn" : "" };
}
