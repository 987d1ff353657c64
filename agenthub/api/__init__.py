"""The HTTP API: the core's admin and chat routes, and the SSE codec its server and `agenthub chat` share."""
