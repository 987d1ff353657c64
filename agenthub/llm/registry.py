"""`ProviderRegistry`: the configured providers by name, offline fallback, and one-turn hint resolution."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import structlog

from agenthub.config import LLMSettings
from agenthub.errors import ConfigError
from agenthub.i18n import Text
from agenthub.llm.calllog import CallLog
from agenthub.llm.endpoint import Endpoint, default_endpoint, named_endpoint
from agenthub.llm.offline import HOW_TO_CONFIGURE, OfflineProvider
from agenthub.llm.types import LLMProvider, Sleep

log = structlog.get_logger(__name__)

DEFAULT = "default"
WARM_UP_ATTEMPTS = 5
WARM_UP_RETRY_S = 1.0


class ProviderRegistry:
    """Named providers; `default` always exists. Built once at start-up, closed at shutdown."""

    def __init__(self, providers: Mapping[str, LLMProvider], *, call_log: CallLog | None = None) -> None:
        if DEFAULT not in providers:
            raise ValueError("a ProviderRegistry needs a 'default' provider")
        self._providers = dict(providers)
        self.call_log = call_log or CallLog()
        """The `CallLog` the providers built by `from_settings` share; `observe` it to count every call."""
        self._warming: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(
        cls, llm: LLMSettings, *, env: Mapping[str, str] | None = None, sleep: Sleep = asyncio.sleep
    ) -> ProviderRegistry:
        """Build every provider; offline when `llm.offline` or no key is found. `ConfigError` on bad config."""
        main = default_endpoint(llm, env)
        offline = llm.offline or not main.has_key
        endpoints = {DEFAULT: main}
        for name, provider_settings in llm.providers.items():
            if name in (DEFAULT, "offline"):
                raise ConfigError(f"llm.providers.{name}: the name {name!r} is reserved")
            endpoints[name] = named_endpoint(name, provider_settings, llm)
            if not offline and not endpoints[name].has_key:
                raise ConfigError(f"llm.providers.{name}.api_key: missing")
        if offline:
            reason = "llm.offline is set" if llm.offline else "no API key is configured"
            log.warning("llm_offline_mode", reason=reason, help=HOW_TO_CONFIGURE)
        else:  # once per start: which vendor and model the turns go to (never the key)
            for name, endpoint in endpoints.items():
                log.info("llm_endpoint", provider=name, host=endpoint.host, model=endpoint.model, preset=llm.preset)
        calls = CallLog()
        providers = {name: _build(name, endpoint, llm, offline, sleep, calls) for name, endpoint in endpoints.items()}
        return cls(providers, call_log=calls)

    @property
    def default(self) -> LLMProvider:
        return self._providers[DEFAULT]

    @property
    def is_offline(self) -> bool:
        """True when the default provider is the offline one."""
        return self.default.offline

    @property
    def names(self) -> list[str]:
        return list(self._providers)

    def get(self, name: str) -> LLMProvider:
        """The provider called `name`; `KeyError` if there is none."""
        return self._providers[name]

    def resolve(
        self,
        model_hint: str | None,
        provider_hint: str | None,
        agent_provider: str | None = None,
        agent_model: str | None = None,
    ) -> tuple[LLMProvider, str, tuple[Text, ...]]:
        """Pick the provider and model for one turn; unusable hints fall back with user-safe warnings."""
        warnings: list[Text] = []
        provider = self._providers.get(agent_provider or DEFAULT)
        if provider is None:
            warnings.append(Text("llm.hint.agent_provider_unknown", _fallback(agent_provider, DEFAULT)))
            provider, agent_model = self.default, None
        model = agent_model or provider.default_model
        if provider_hint is not None:
            hinted = self._providers.get(provider_hint.strip())
            if hinted is None:
                warnings.append(Text("llm.hint.provider_unknown", _fallback(provider_hint, provider.name)))
            elif hinted is not provider:
                provider, model = hinted, hinted.default_model
        if model_hint is not None:
            if provider.knows_model(model_hint):
                model = model_hint
            else:
                warnings.append(Text("llm.hint.model_unusable", _fallback(model_hint, model, "model")))
        return provider, model, tuple(warnings)

    def start_warm_up(self, then: Callable[[], None] | None = None) -> None:
        """Load the providers' SDK and clients in the background (after READY: a start-up does not wait for the
        SDK's seconds of import; a call that comes first waits for the same import, off the event loop); `then`
        runs on the loop once every provider was warmed up (or gave up)."""
        if self._warming is None:
            self._warming = asyncio.create_task(self._warm_up(then), name="llm-warm-up")

    async def _warm_up(self, then: Callable[[], None] | None = None) -> None:
        await self._warm_each()
        if then is not None:
            then()

    async def _warm_each(self) -> None:
        for name, provider in self._providers.items():
            for attempt in range(WARM_UP_ATTEMPTS):
                try:
                    await provider.warm_up()
                    break
                except Exception as e:  # e.g. no descriptor left to read the SDK's files: a call loads it again
                    log.debug("llm_provider_warm_up_failed", provider=name, attempt=attempt + 1, error=str(e))
                    await asyncio.sleep(WARM_UP_RETRY_S)

    async def aclose(self) -> None:
        """Close every provider (errors are logged, not raised)."""
        if self._warming is not None and not self._warming.done():
            self._warming.cancel()
            await asyncio.wait([self._warming])
        for name, provider in self._providers.items():
            try:
                await provider.aclose()
            except Exception:
                log.exception("llm_provider_close_failed", provider=name)


def _fallback(asked: str | None, used: str, name: str = "provider") -> dict[str, str]:
    """The parameters of a fallback warning: what was asked for (as `name`) and what is used instead."""
    return {name: _show(asked), "fallback": repr(used)}


def _show(value: str | None) -> str:
    """A short, printable rendering of user input for warnings."""
    text = "".join(ch for ch in (value or "") if ch.isprintable())
    return repr(text if len(text) <= 40 else text[:39] + "…")


def _build(name: str, endpoint: Endpoint, llm: LLMSettings, offline: bool, sleep: Sleep, calls: CallLog) -> LLMProvider:
    if offline:
        return OfflineProvider(name=name, default_model=endpoint.model, call_log=calls)
    # imported here: the SDK takes seconds to import, and an offline start never needs it
    from agenthub.llm.anthropic_provider import AnthropicProvider, RetryPolicy

    retry = RetryPolicy(max_retries=llm.max_retries, base_s=llm.retry_base_s, max_s=llm.retry_max_s)
    return AnthropicProvider(
        endpoint,
        name=name,
        timeout_s=llm.timeout_s,
        connect_timeout_s=llm.connect_timeout_s,
        retry=retry,
        sleep=sleep,
        call_log=calls,
    )
