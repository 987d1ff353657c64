// The console's own texts in zh-CN and en; the locale is the HTTP channel's, served as <html lang>.

const TEXTS = {
  "zh-CN": {
    "page.title": "AgentHub 控制台",
    "signin.hint.before": "请输入访问令牌。可在服务器上运行 ",
    "signin.hint.after": " 生成。",
    "signin.token": "访问令牌",
    "signin.submit": "登录",
    "signin.invalid": "令牌无效或已失效，请重新输入。",
    "sidebar": "会话",
    "agent": "智能体",
    "new_chat": "新建会话",
    "new_chat.button": "＋ 新建会话",
    "session_list": "会话列表",
    "session_empty": "还没有会话",
    "sign_out": "退出登录",
    "lang.switch": "English",
    "lang.switch.label": "切换到英文",
    "chat": "对话",
    "offline": "模型离线：服务器未配置 API 密钥，回复来自离线占位模型。",
    "banner.close": "点击关闭",
    "chat.pick": "选择或新建一个会话",
    "meter": "上下文用量",
    "compact": "压缩",
    "compact.label": "压缩上下文",
    "compact.title": "把较早的消息总结成摘要",
    "messages": "消息",
    "input": "输入消息",
    "input.placeholder": "输入消息，Enter 发送，Shift+Enter 换行",
    "stop": "停止",
    "send": "发送",
    "session.pinned": "置顶",
    "session.unpin": "取消置顶",
    "session.pin": "置顶",
    "session.rename": "重命名",
    "session.delete": "删除",
    "session.title": "会话标题",
    "session.untitled": "新会话",
    "session.delete_confirm": "删除会话「{title}」？历史消息会一并删除，无法恢复。",
    "chat.start": "点击「新建会话」开始，或直接输入消息。",
    "welcome.fallback": "你好，我是 {agent}。有什么可以帮你？",
    "tool.error": "出错",
    "tool.done": "已完成",
    "tool.running": "工具 {name} 运行中…",
    "tool.finished": "工具 {name} {done}",
    "reply.failed": "回复失败",
    "reply.incomplete": "连接中断，回复没有完成。",
    "reply.stopped": "（已停止）",
    "reply.error": "出错了：{message}",
    "compact.confirm": "把较早的消息总结成摘要以释放上下文？原文会存档。",
    "compact.result": "{result}（{before} → {after} 条消息）",
    "compact.busy": "正在回复中，请稍后再压缩。",
    "tool.chip": "工具 {name}({input})",
    "tool.result_error": "工具出错 ↳",
    "summary": "历史摘要（较早的对话已被总结）",
    "time.now": "刚刚",
    "time.minutes": "{n} 分钟前",
    "time.hours": "{n} 小时前",
    "time.date": "{month}月{day}日",
    "meter.window": " · 窗口 {window}",
    "meter.estimated": "（估算）",
    "meter.tip": "{messages} 条消息；达到 {limit} tokens 时自动把较早的消息总结成摘要",
    "meter.has_summary": "；已有历史摘要",
    "usage": "用量",
    "usage.title": "用量",
    "usage.by": "按",
    "usage.by.user": "用户",
    "usage.by.chat": "会话",
    "usage.by.agent": "智能体",
    "usage.by.model": "模型",
    "usage.period.label": "周期",
    "usage.period.day": "按天",
    "usage.period.month": "按月",
    "usage.period": "日期",
    "usage.close": "关闭",
    "usage.kind.input": "输入",
    "usage.kind.output": "输出",
    "usage.kind.cache_read": "缓存读取",
    "usage.kind.cache_write": "缓存写入",
    "usage.total": "合计 tokens",
    "usage.cost": "费用",
    "usage.empty": "这段时间还没有用量。",
    "usage.chart": "本月每日 tokens",
    "usage.range": "{from} 至 {to}（{zone}）",
  },
  en: {
    "page.title": "AgentHub console",
    "signin.hint.before": "Enter an access token. Make one on the server with ",
    "signin.hint.after": ".",
    "signin.token": "Access token",
    "signin.submit": "Sign in",
    "signin.invalid": "The token is wrong or no longer valid; please enter it again.",
    "sidebar": "Chats",
    "agent": "Agent",
    "new_chat": "New chat",
    "new_chat.button": "+ New chat",
    "session_list": "Chat list",
    "session_empty": "No chats yet",
    "sign_out": "Sign out",
    "lang.switch": "中文",
    "lang.switch.label": "Switch to Chinese",
    "chat": "Conversation",
    "offline": "Model offline: the server has no API key configured, so replies come from an offline placeholder.",
    "banner.close": "Click to close",
    "chat.pick": "Pick a chat or start a new one",
    "meter": "Context used",
    "compact": "Compact",
    "compact.label": "Compact the context",
    "compact.title": "Summarise older messages",
    "messages": "Messages",
    "input": "Message",
    "input.placeholder": "Type a message; Enter sends, Shift+Enter adds a line",
    "stop": "Stop",
    "send": "Send",
    "session.pinned": "Pinned",
    "session.unpin": "Unpin",
    "session.pin": "Pin",
    "session.rename": "Rename",
    "session.delete": "Delete",
    "session.title": "Chat title",
    "session.untitled": "New chat",
    "session.delete_confirm": "Delete the chat “{title}”? Its messages go with it, for good.",
    "chat.start": "Click “New chat” to begin, or just type a message.",
    "welcome.fallback": "Hi, I'm {agent}. How can I help?",
    "tool.error": "failed",
    "tool.done": "done",
    "tool.running": "Tool {name} running…",
    "tool.finished": "Tool {name} {done}",
    "reply.failed": "The reply failed",
    "reply.incomplete": "The connection broke; the reply is incomplete.",
    "reply.stopped": "(stopped)",
    "reply.error": "Error: {message}",
    "compact.confirm": "Summarise older messages to free context? The originals are archived.",
    "compact.result": "{result} ({before} → {after} messages)",
    "compact.busy": "A reply is running; compact again when it is done.",
    "tool.chip": "Tool {name}({input})",
    "tool.result_error": "tool failed ↳",
    "summary": "Summary (the earlier conversation was summarised)",
    "time.now": "just now",
    "time.minutes": "{n} min ago",
    "time.hours": "{n} h ago",
    "time.date": "{day}/{month}",
    "meter.window": " · window {window}",
    "meter.estimated": " (estimated)",
    "meter.tip": "{messages} messages; at {limit} tokens older messages are summarised automatically",
    "meter.has_summary": "; a summary exists",
    "usage": "Usage",
    "usage.title": "Usage",
    "usage.by": "By",
    "usage.by.user": "User",
    "usage.by.chat": "Chat",
    "usage.by.agent": "Agent",
    "usage.by.model": "Model",
    "usage.period.label": "Period",
    "usage.period.day": "Per day",
    "usage.period.month": "Per month",
    "usage.period": "Date",
    "usage.close": "Close",
    "usage.kind.input": "Input",
    "usage.kind.output": "Output",
    "usage.kind.cache_read": "Cache read",
    "usage.kind.cache_write": "Cache write",
    "usage.total": "Total tokens",
    "usage.cost": "Cost",
    "usage.empty": "No usage in this period yet.",
    "usage.chart": "Tokens per day this month",
    "usage.range": "{from} to {to} ({zone})",
  },
};

export const locale = document.documentElement.lang.toLowerCase().startsWith("en") ? "en" : "zh-CN";

/** The console's language switch: the page again in the other locale (`?lang=`), remembered in this browser. */
export function switchLanguage() {
  const other = locale === "en" ? "zh-CN" : "en";
  localStorage.setItem("agenthub.lang", other);
  const url = new URL(location.href);
  url.searchParams.set("lang", other);
  location.assign(url.toString());
}

/** A language chosen earlier in this browser, when the page came in another one without `?lang=`. */
export function rememberedLanguage() {
  const chosen = localStorage.getItem("agenthub.lang");
  const url = new URL(location.href);
  if (!chosen || chosen === locale || url.searchParams.has("lang")) return null;
  url.searchParams.set("lang", chosen);
  return url.toString();
}

/** The console text `key` in the console's locale, with `{names}` filled from `params`. */
export function t(key, params = {}) {
  const template = TEXTS[locale][key] ?? TEXTS["zh-CN"][key] ?? key;
  return template.replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

/** Put the page's static texts into the locale: `data-i18n` (the text) and `data-i18n-<attr>` (an attribute). */
export function localisePage(root = document) {
  document.title = t("page.title");
  for (const node of root.querySelectorAll("[data-i18n]")) node.textContent = t(node.dataset.i18n);
  for (const attr of ["aria-label", "placeholder", "title"]) {
    const name = `i18n${attr.replace(/(^|-)(\w)/g, (_, __, c) => c.toUpperCase())}`;
    for (const node of root.querySelectorAll(`[data-i18n-${attr}]`)) node.setAttribute(attr, t(node.dataset[name]));
  }
}
