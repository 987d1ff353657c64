"""What a failed connection to a model endpoint says: the host and port tried, and the cause a person can act on
(DNS, refused, TLS, timeout, reset), read from the exception chain the SDK and its transport raise."""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Iterator


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        for name in ("os_error", "certificate_error"):  # aiohttp's connector errors keep theirs as attributes
            inner = getattr(current, name, None)
            if isinstance(inner, BaseException) and id(inner) not in seen:
                yield inner
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def endpoint_of(exc: BaseException) -> str | None:
    """`host:port` of the request an SDK error carries (its `request.url`), else None."""
    url = getattr(getattr(exc, "request", None), "url", None)
    host = getattr(url, "host", None)
    if not host:
        return None
    port = getattr(url, "port", None) or (443 if getattr(url, "scheme", "") == "https" else 80)
    return f"{host}:{port}"


def cause_of(exc: BaseException) -> str:
    """The cause of a connection failure in a few words: DNS, refused, TLS, timeout, reset, unreachable."""
    names = []
    for item in _chain(exc):
        names.append(type(item).__name__)
        if isinstance(item, socket.gaierror):
            return f"DNS lookup failed ({item.strerror or item})"
        if isinstance(item, ssl.SSLCertVerificationError):
            inner = getattr(item, "certificate_error", None) or item
            return f"TLS certificate not accepted ({getattr(inner, 'verify_message', None) or inner})"
        if isinstance(item, ssl.SSLError):
            inner = getattr(item, "os_error", None) or item
            return f"TLS handshake failed ({getattr(inner, 'reason', None) or type(inner).__name__})"
        if isinstance(item, ConnectionRefusedError):
            return "connection refused (nothing listens there)"
        if isinstance(item, ConnectionResetError):
            return "connection reset by the server"
        if isinstance(item, OSError) and item.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "network unreachable"
        if "ConnectTimeout" in type(item).__name__:
            return "timeout while connecting"
        if isinstance(item, TimeoutError) or "Timeout" in type(item).__name__:
            return "timeout waiting for the answer"
    return f"connection failed ({names[-1] if names else 'unknown'})"


def describe(exc: BaseException) -> str:
    """`<host:port>: <cause>` for a failed connection (no URL path, no credential)."""
    where = endpoint_of(exc)
    return f"{where}: {cause_of(exc)}" if where else cause_of(exc)
