"""Feishu/Lark channel; lark-oapi is imported only when the channel starts."""

from channels.feishu.channel import FeishuChannel

__all__ = ["FeishuChannel"]
