"""`CallLog`: one `llm_call` log line per successful model call, tagged with its purpose, plus call observers."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from agenthub.llm.cache_watch import CacheWatch
from agenthub.llm.types import LLMRequest, LLMResponse
from agenthub.messages import Usage

log = structlog.get_logger(__name__)

CallObserver = Callable[[float, Usage], None]
"""Told `(seconds, usage)` after each successful call (the gateway's stats)."""

CallWatcher = Callable[[LLMRequest, LLMResponse], None]
"""Told the whole request and response after each successful call (the usage records)."""


class CallLog:
    """Shared by every provider of one registry, so turns and background calls are logged and counted alike."""

    def __init__(self) -> None:
        self._observers: list[CallObserver] = []
        self.cache = CacheWatch()
        """Each chat's calls compared for prompt-cache breaks (`prompt_cache_break`, /metrics, /status)."""
        self._watchers: list[CallWatcher] = []

    def observe(self, observer: CallObserver) -> None:
        self._observers.append(observer)

    def watch(self, watcher: CallWatcher) -> None:
        self._watchers.append(watcher)

    def record(self, provider: str, request: LLMRequest, response: LLMResponse, seconds: float) -> None:
        log.info(  # one line per model call, so token spend is always visible
            "llm_call",
            purpose=request.purpose,
            provider=provider,
            model=request.model,
            seconds=round(seconds, 3),
            stop_reason=response.stop_reason,
            **response.usage.as_dict(),
        )
        try:
            self.cache.observe(request, response)
        except Exception:  # the watch only explains costs: it must never fail a good (and paid) answer
            log.exception("llm_call_observer_failed", observer="CacheWatch.observe")
        for observer in self._observers:
            try:
                observer(seconds, response.usage)
            except Exception:  # a broken counter must not turn a good (and paid) answer into a failure
                log.exception("llm_call_observer_failed", observer=getattr(observer, "__qualname__", repr(observer)))
        for watcher in self._watchers:
            try:
                watcher(request, response)
            except Exception:  # the same: a usage record that fails never fails the call
                log.exception("llm_call_observer_failed", observer=getattr(watcher, "__qualname__", repr(watcher)))
