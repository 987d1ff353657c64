"""The `[search.embeddings]` client: an OpenAI-compatible `POST {base_url}/v1/embeddings` on aiohttp, unit-length
float32 vectors back, and a breaker so a failing endpoint is logged once per outage and left alone meanwhile."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import numpy as np
import structlog
from numpy.typing import NDArray

from agenthub.config import EmbeddingsSettings

log = structlog.get_logger(__name__)

Vector = NDArray[np.float32]


class EmbeddingsUnavailable(Exception):
    """The endpoint failed, answered something unusable, or is being left alone after a failure."""


def endpoint_url(base_url: str) -> str:
    """`{base_url}/v1/embeddings`; a base URL that already ends in `/v1` gets `/embeddings` only."""
    base = base_url.rstrip("/")
    return base + ("/embeddings" if base.endswith("/v1") else "/v1/embeddings")


def api_key(settings: EmbeddingsSettings) -> str | None:
    if settings.api_key is not None:
        return settings.api_key.get_secret_value()
    if settings.api_key_env:
        return os.environ.get(settings.api_key_env) or None
    return None


def unit(values: Sequence[float]) -> Vector:
    vector = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


class EmbeddingsClient:
    """Embeds texts; `embed` raises `EmbeddingsUnavailable` (never anything with the endpoint's text or the key)."""

    def __init__(self, settings: EmbeddingsSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        assert settings.base_url is not None
        self.settings = settings
        self.url = endpoint_url(settings.base_url)
        self.model = settings.model
        self._key = api_key(settings)
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._down_until: float | None = None
        self.failures = 0
        """Failed requests (a statistic; only the first of an outage is logged)."""

    @property
    def available(self) -> bool:
        return self._down_until is None or self._clock() >= self._down_until

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[Vector]:
        """One unit vector per text, in order. `query`: bounded by `query_timeout_s`, else `timeout_s` per batch."""
        if not self.available:
            raise EmbeddingsUnavailable("left alone after a failure")
        cut = [t[: self.settings.max_text_chars] or " " for t in texts]
        size = self.settings.batch
        vectors: list[Vector] = []
        for start in range(0, len(cut), size):
            vectors.extend(await self._request(cut[start : start + size], query))
        return vectors

    async def _request(self, texts: list[str], query: bool) -> list[Vector]:
        timeout = self.settings.query_timeout_s if query else self.settings.timeout_s
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.settings.dims is not None:
            body["dimensions"] = self.settings.dims
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            async with asyncio.timeout(timeout):
                session = self._session_now()
                async with session.post(self.url, json=body, headers=headers) as response:
                    if response.status != 200:
                        raise EmbeddingsUnavailable(f"status {response.status}")
                    payload = await response.json(content_type=None)
            vectors = self._parse(payload, len(texts))
        except (TimeoutError, aiohttp.ClientError, ValueError, EmbeddingsUnavailable) as e:
            self._failed(e)
            raise EmbeddingsUnavailable(type(e).__name__) from None
        if self._down_until is not None:
            self._down_until = None
            log.info("embeddings_available", model=self.model)
        return vectors

    def _parse(self, payload: Any, count: int) -> list[Vector]:
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or len(data) != count:
            raise ValueError("not one embedding per input")
        ordered: list[Vector | None] = [None] * count
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            values = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < count or not isinstance(values, list) or not values:
                raise ValueError("malformed embedding")
            if self.settings.dims is not None and len(values) != self.settings.dims:
                raise ValueError("embedding of another length than dims")
            ordered[index] = unit(values)
        if any(v is None for v in ordered) or len({v.shape for v in ordered if v is not None}) != 1:
            raise ValueError("embeddings missing or of different lengths")
        return [v for v in ordered if v is not None]

    def _failed(self, error: BaseException) -> None:
        self.failures += 1
        first = self._down_until is None
        self._down_until = self._clock() + self.settings.retry_after_s
        if first:  # one line per outage, not one per query
            log.warning(
                "embeddings_unavailable",
                model=self.model,
                error_type=type(error).__name__,
                detail=str(error) if isinstance(error, EmbeddingsUnavailable) else "",
                retry_after_s=self.settings.retry_after_s,
            )

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
