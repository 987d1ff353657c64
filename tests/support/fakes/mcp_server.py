"""A small MCP tool server written with the SDK's FastMCP.

Run as `python tests/support/fakes/mcp_server.py [stdio|http PORT]`.

It imports nothing from this repository (the stdio client starts it with a minimal environment).
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.fastmcp import FastMCP

server = FastMCP("agenthub-test", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return f"echo: {text}"


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def env(name: str) -> str:
    """The value of an environment variable of the server process."""
    return os.environ.get(name, "(unset)")


@server.tool()
def big(chars: int) -> str:
    """A deterministic text of `chars` characters: numbered lines."""
    lines, size, n = [], 0, 0
    while size < chars:
        line = f"line {n:06d} " + "abcdefghij" * 5 + "\n"
        lines.append(line)
        size += len(line)
        n += 1
    return "".join(lines)[:chars]


@server.tool()
def crash() -> str:
    """Exit the process in the middle of the call."""
    os._exit(3)


_arrived: list[str] = []
_all_here = anyio.Event()


@server.tool()
async def rendezvous(tag: str, count: int) -> str:
    """Answer only once `count` calls are waiting here at the same time (proves the client sends them at once)."""
    _arrived.append(tag)
    if len(_arrived) >= count:
        _all_here.set()
    await _all_here.wait()
    return f"{tag} met {count}"


@server.tool()
async def sleep(seconds: float) -> str:
    """Answer after `seconds`."""
    await anyio.sleep(seconds)
    return "slept"


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.settings.port = int(sys.argv[2])
        server.run("streamable-http")
    else:
        server.run("stdio")
