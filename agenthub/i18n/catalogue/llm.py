"""Texts about the model: why a call failed, a hint that could not be used, the offline stand-in's reply."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "llm.busy": {
        "zh-CN": "模型服务现在繁忙或不可用，请稍后再试。",
        "en": "The model service is busy or unavailable right now. Please try again in a moment.",
    },
    "llm.timeout": {
        "zh-CN": "模型没有及时回答，请再试一次。",
        "en": "The model did not answer in time. Please try again.",
    },
    "llm.network": {
        "zh-CN": "无法连接模型服务（网络错误），请稍后再试。",
        "en": "Could not reach the model service (network error). Please try again later.",
    },
    "llm.auth": {
        "zh-CN": "模型服务拒绝了 API 密钥，请检查 API 密钥配置。",
        "en": "The model service rejected the API key. Please check your API key configuration.",
    },
    "llm.billing": {
        "zh-CN": "模型服务因计费原因拒绝了请求，请检查账户。",
        "en": "The model service refused the request for billing reasons. Please check your account.",
    },
    "llm.overflow": {
        "zh-CN": "这段对话超出了模型的上下文窗口。",
        "en": "The conversation is too long for the model's context window.",
    },
    "llm.rejected": {"zh-CN": "模型服务拒绝了这个请求。", "en": "The model service rejected the request."},
    "llm.unexpected": {
        "zh-CN": "模型调用意外失败，请再试一次。",
        "en": "The model call failed unexpectedly. Please try again.",
    },
    "llm.interrupted": {
        "zh-CN": "回复因模型服务出错而中断，上面的内容不完整。请再试一次。",
        "en": "The reply was interrupted by a model service error; the text above is incomplete. Please try again.",
    },
    "llm.empty_reply": {"zh-CN": "模型返回了空回复。", "en": "The model sent an empty reply."},
    "llm.model_unknown": {
        "zh-CN": "模型服务不认识模型 {model}。",
        "en": "The model service does not know the model {model}.",
    },
    "llm.hint.agent_provider_unknown": {
        "zh-CN": "助手配置里的提供方 {provider} 不存在，改用 {fallback}",
        "en": "unknown provider {provider} in the agent's config; using {fallback}",
    },
    "llm.hint.provider_unknown": {
        "zh-CN": "提供方 {provider} 不存在，改用 {fallback}",
        "en": "unknown provider {provider}; using {fallback}",
    },
    "llm.hint.model_unusable": {
        "zh-CN": "模型提示 {model} 不是可用的模型名，改用 {fallback}",
        "en": "model hint {model} is not a usable model name; using {fallback}",
    },
    "llm.hint.separator": {"zh-CN": "；", "en": "; "},
    "llm.offline.reply": {
        "zh-CN": "[离线] AgentHub 没有配置模型 API 密钥，这是一条自动回复。{echo}"
        "要接入真实模型，请设置 AGENTHUB_LLM__API_KEY（或 ANTHROPIC_API_KEY）；如使用兼容 Anthropic 的厂商，"
        "再设置 llm.base_url 或 llm.preset（如 deepseek、moonshot、zhipu、qwen），然后重启。",
        "en": "[offline] AgentHub has no LLM API key configured, so this is an automatic reply.{echo} "
        "To talk to a real model, set AGENTHUB_LLM__API_KEY (or ANTHROPIC_API_KEY) and, for an "
        "Anthropic-compatible vendor, llm.base_url or llm.preset (e.g. deepseek, moonshot, zhipu, qwen), then restart.",
    },
    "llm.offline.echo": {"zh-CN": "你说的是：“{said}”。", "en": ' You said: "{said}".'},
    "loop.cut": {"zh-CN": "（回复在完成之前被截断了。）", "en": "(The reply was cut off before it finished.)"},
    "loop.cut.max_tokens": {
        "zh-CN": "（回复在长度上限处被截断了。）",
        "en": "(The reply was cut off at the length limit.)",
    },
    "loop.cut.context_window": {
        "zh-CN": "（回复被截断：这段对话已占满模型的上下文窗口。发送 /compact 腾出空间，或发送 /restart 重新开始。）",
        "en": "(The reply was cut off: this conversation has filled the model's context window. "
        "Send /compact to make room, or /restart to start over.)",
    },
    "loop.refusal": {
        "zh-CN": "模型拒绝回答这个请求。请换个说法，或问点别的。",
        "en": "The model declined to answer this request. Please rephrase it or ask something else.",
    },
    "loop.refusal.note": {
        "zh-CN": "（模型在这里停下，拒绝继续。）",
        "en": "(The model stopped here and declined to go on.)",
    },
    "loop.empty_reply": {
        "zh-CN": "（模型结束了，但没有写出回复。请再试一次，或换个说法。）",
        "en": "(The model finished without writing a reply. Please try again or rephrase your message.)",
    },
}
