"""The WeCom fixtures (fake `cgi-bin` API, app harness, fake AI-bot server), for this folder's tests only."""

from tests.support.wecom import api, harness, server, stepped

__all__ = ["api", "harness", "server", "stepped"]
