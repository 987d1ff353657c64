// The console's usage page: a daily chart of the month's tokens and a table by user, chat, agent or model.

import { api } from "/static/api.js";
import { t } from "/static/i18n.js";
import { el } from "/static/render.js";

const $ = (id) => document.getElementById(id);
const KINDS = ["input", "output", "cache_read", "cache_write"];
const SVG = "http://www.w3.org/2000/svg";

function whoOf(row, by) {
  if (by === "user") {
    const name = row.sender_name && row.sender_name !== row.sender ? `${row.sender_name} · ${row.sender}` : row.sender;
    return `${name} (${row.channel})`;
  }
  if (by === "chat") return `${row.chat_id} (${row.channel})`;
  return by === "agent" ? row.agent : row.model;
}

function costOf(row) {
  if (!row.cost) return "—";
  return Object.entries(row.cost)
    .map(([currency, amount]) => `${amount.toFixed(4)} ${currency}`)
    .join(" + ");
}

function table(rows, by) {
  const head = el("tr", {}, ...["usage.period", `usage.by.${by}`, ...KINDS.map((k) => `usage.kind.${k}`), "usage.total", "usage.cost"]
    .map((key) => el("th", { scope: "col", text: t(key) })));
  const body = rows.map((row) =>
    el(
      "tr",
      {},
      el("td", { text: row.period }),
      el("td", { text: whoOf(row, by) }),
      ...KINDS.map((k) => el("td", { class: "num", text: row[k].toLocaleString() })),
      el("td", { class: "num", text: row.tokens.toLocaleString() }),
      el("td", { class: "num", text: costOf(row) }),
    ),
  );
  if (!body.length) body.push(el("tr", {}, el("td", { colspan: 8, class: "muted", text: t("usage.empty") })));
  return [el("thead", {}, head), el("tbody", {}, ...body)];
}

function chart(rows) {
  const days = new Map();
  for (const row of rows) days.set(row.period, (days.get(row.period) || 0) + row.tokens);
  const sorted = [...days.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
  const svg = document.createElementNS(SVG, "svg");
  const width = Math.max(320, sorted.length * 28);
  svg.setAttribute("viewBox", `0 0 ${width} 140`);
  svg.setAttribute("preserveAspectRatio", "xMinYMid meet");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", t("usage.chart"));
  const top = Math.max(1, ...sorted.map(([, v]) => v));
  sorted.forEach(([day, value], i) => {
    const height = Math.round((value / top) * 110);
    const bar = document.createElementNS(SVG, "rect");
    bar.setAttribute("x", String(i * 28 + 4));
    bar.setAttribute("y", String(120 - height));
    bar.setAttribute("width", "20");
    bar.setAttribute("height", String(height));
    bar.setAttribute("class", "usage-bar");
    bar.setAttribute("data-day", day);
    const title = document.createElementNS(SVG, "title");
    title.textContent = `${day}: ${value.toLocaleString()} tokens`;
    bar.append(title);
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", String(i * 28 + 14));
    label.setAttribute("y", "134");
    label.setAttribute("text-anchor", "middle");
    label.textContent = day.slice(8);
    svg.append(bar, label);
  });
  return svg;
}

async function refresh() {
  const by = $("usage-by").value;
  const period = $("usage-period").value;
  const [rows, daily] = await Promise.all([api.usage(by, period), api.usage("model", "day")]);
  $("usage-table").replaceChildren(...table(rows.rows, by));
  $("usage-chart").replaceChildren(chart(daily.rows));
  $("usage-range").textContent = t("usage.range", { from: rows.from, to: rows.to, zone: rows.timezone });
}

/** Wire the usage page's controls; `guard` reports errors the way the rest of the console does. */
export function initUsage(guard) {
  $("open-usage").addEventListener("click", () => {
    $("usage-panel").hidden = false;
    guard(refresh);
  });
  $("close-usage").addEventListener("click", () => {
    $("usage-panel").hidden = true;
  });
  for (const id of ["usage-by", "usage-period"]) $(id).addEventListener("change", () => guard(refresh));
}
