"""The HTTP channel: the JSON/SSE API, session admin, and the web console, on the daemon's server."""

from channels.http.channel import HttpChannel

__all__ = ["HttpChannel"]
