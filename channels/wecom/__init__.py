"""The WeCom (企业微信) channel: self-built app callbacks and the AI-bot long connection."""

from channels.wecom.channel import WeComChannel

__all__ = ["WeComChannel"]
