"""A model connection that fails names the host and port tried and the cause: DNS, refused, TLS, timeout."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from agenthub.errors import LLMError
from agenthub.llm.anthropic_provider import AnthropicProvider, RetryPolicy
from agenthub.llm.endpoint import Endpoint
from agenthub.llm.types import LLMRequest

KEY = "sk-transport-test-secret"


async def failure_for(base_url: str, timeout_s: float = 2.0) -> str:
    endpoint = Endpoint(base_url, KEY, "claude-test", custom_base_url=True)
    provider = AnthropicProvider(
        endpoint, timeout_s=timeout_s, connect_timeout_s=timeout_s, retry=RetryPolicy(max_retries=0)
    )
    try:
        with pytest.raises(LLMError) as caught:
            await provider.complete(LLMRequest("claude-test", [], [{"role": "user", "content": "hi"}], [], 8))
    finally:
        await provider.aclose()
    message = str(caught.value)
    assert KEY not in message
    return message


@pytest.fixture
async def plain_http_port() -> AsyncIterator[int]:
    """A server that answers plain HTTP: an https:// URL to it fails the TLS handshake."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(64)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_a_refused_connection_names_the_host_and_says_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert await failure_for(f"http://127.0.0.1:{port}") == (
        f"connection error: 127.0.0.1:{port}: connection refused (nothing listens there)"
    )


async def test_an_unknown_host_says_dns() -> None:
    message = await failure_for("https://no-such-host.invalid/api/anthropic")
    assert message.startswith("connection error: no-such-host.invalid:443: DNS lookup failed"), message


async def test_https_to_a_plain_http_server_says_tls(plain_http_port: int) -> None:
    message = await failure_for(f"https://127.0.0.1:{plain_http_port}")
    assert message.startswith(f"connection error: 127.0.0.1:{plain_http_port}: TLS handshake failed"), message


async def test_a_server_that_never_answers_says_timeout() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections are queued, never answered
        port = silent.getsockname()[1]
        message = await failure_for(f"http://127.0.0.1:{port}", timeout_s=0.5)
    assert message == f"timeout: 127.0.0.1:{port}: timeout waiting for the answer"
