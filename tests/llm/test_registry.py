"""ProviderRegistry from settings (env fallback, presets, offline mode) and one-turn hint resolution."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from agenthub import i18n
from agenthub.config import LLMSettings, ProviderSettings
from agenthub.errors import ConfigError
from agenthub.llm import AnthropicProvider, LLMRequest, OfflineProvider, ProviderRegistry, context_window
from agenthub.llm.presets import PRESETS, normalise_base_url
from tests.support.fakes.anthropic import FakeAnthropic, reply_text


def settings(**kw: object) -> LLMSettings:
    return LLMSettings.model_validate(kw)


@pytest.fixture
async def registry(fake_llm: FakeAnthropic) -> AsyncIterator[ProviderRegistry]:
    llm = settings(
        base_url=fake_llm.base_url,
        api_key="k-main",
        model="claude-main",
        providers={"deep": {"preset": "deepseek", "api_key": "k-deep", "model": "deepseek-flash"}},
    )
    reg = ProviderRegistry.from_settings(llm, env={})
    yield reg
    await reg.aclose()


def one_turn(text: str = "hi") -> LLMRequest:
    return LLMRequest("m", [], [{"role": "user", "content": text}], [], 64)


async def test_settings_base_url_with_v1_is_stripped_and_both_headers_sent(fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("pong"))
    reg = ProviderRegistry.from_settings(settings(base_url=fake_llm.base_url + "/v1/", api_key="k1"), env={})
    try:
        resp = await reg.default.stream(LLMRequest("claude-x", [], [{"role": "user", "content": "ping"}], [], 64))
    finally:
        await reg.aclose()
    assert resp.text == "pong"
    rec = fake_llm.requests[0]
    assert rec.path == "/v1/messages"
    assert rec.headers["authorization"] == "Bearer k1"
    assert rec.headers["x-api-key"] == "k1"
    assert rec.body is not None and rec.body["model"] == "claude-x"


async def test_environment_supplies_base_url_and_auth_token(
    fake_llm: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.base_url)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "tok-env")
    reg = ProviderRegistry.from_settings(settings())
    try:
        assert not reg.is_offline
        await reg.default.complete(one_turn())
    finally:
        await reg.aclose()
    assert fake_llm.requests[0].headers["authorization"] == "Bearer tok-env"


async def test_no_key_means_offline_with_one_warning() -> None:
    with capture_logs() as logs:
        reg = ProviderRegistry.from_settings(settings(model="claude-a"), env={})
    assert reg.is_offline
    assert isinstance(reg.default, OfflineProvider)
    assert reg.default.default_model == "claude-a"
    warnings = [e for e in logs if e["event"] == "llm_offline_mode"]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
    assert "ANTHROPIC_API_KEY" in warnings[0]["help"]
    await reg.aclose()


async def test_offline_flag_wins_over_a_key() -> None:
    llm = settings(api_key="k", offline=True, providers={"x": {"preset": "zhipu"}})
    reg = ProviderRegistry.from_settings(llm, env={})
    assert reg.is_offline and reg.get("x").offline
    await reg.aclose()


async def test_presets_fill_base_urls(registry: ProviderRegistry) -> None:
    deep = registry.get("deep")
    assert isinstance(deep, AnthropicProvider)
    assert deep.base_url == "https://api.deepseek.com/anthropic"
    assert deep.default_model == "deepseek-flash"
    for name in ("deepseek", "moonshot", "moonshot-global", "zhipu", "zai", "minimax", "minimax-global", "qwen"):
        assert PRESETS[name].startswith("https://") and not PRESETS[name].endswith("/v1")
    for name in ("qwen-intl", "qianfan", "lkeap", "anthropic"):
        assert name in PRESETS
    main = ProviderRegistry.from_settings(settings(preset="Moonshot", api_key="k"), env={})
    assert isinstance(main.default, AnthropicProvider)
    assert main.default.base_url == "https://api.moonshot.cn/anthropic"
    await main.aclose()


@pytest.mark.parametrize(
    ("llm", "key"),
    [
        ({"preset": "nope", "api_key": "k"}, "llm.preset"),
        ({"api_key": "k", "providers": {"x": {"preset": "nope", "api_key": "k"}}}, "llm.providers.x.preset"),
        ({"api_key": "k", "providers": {"x": {"preset": "qwen"}}}, "llm.providers.x.api_key"),
        ({"api_key": "k", "providers": {"x": {"api_key": "k"}}}, "llm.providers.x"),
        ({"api_key": "k", "providers": {"default": {"preset": "qwen", "api_key": "k"}}}, "llm.providers.default"),
        ({"api_key": "k", "base_url": "ftp://host"}, "llm.base_url"),
    ],
)
async def test_bad_config_names_the_key(llm: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ProviderRegistry.from_settings(settings(**llm), env={})
    assert key in str(info.value)
    assert "k-" not in str(info.value)


def test_normalise_base_url() -> None:
    assert normalise_base_url(" https://h/anthropic/v1/ ") == "https://h/anthropic"
    assert normalise_base_url("http://h:1/v1") == "http://h:1"
    assert normalise_base_url("http://h/v10") == "http://h/v10"


def test_get_unknown_raises_key_error() -> None:
    reg = ProviderRegistry.from_settings(settings(), env={})
    with pytest.raises(KeyError):
        reg.get("missing")


def _in_each_locale(warnings: tuple[i18n.Text, ...]) -> list[str]:
    """The warnings as the user reads them, once per locale (at least one warning is expected)."""
    assert warnings
    return [" ".join(w.render(locale) for w in warnings) for locale in i18n.LOCALES]


async def test_resolve_defaults_and_valid_hints(registry: ProviderRegistry) -> None:
    provider, model, warning = registry.resolve(None, None)
    assert (provider.name, model, warning) == ("default", "claude-main", ())
    provider, model, warning = registry.resolve("claude-opus-4-1", None, None, "claude-agent")
    assert (provider.name, model, warning) == ("default", "claude-opus-4-1", ())
    provider, model, warning = registry.resolve(None, "deep", None, "claude-agent")
    assert (provider.name, model, warning) == ("deep", "deepseek-flash", ())
    provider, model, warning = registry.resolve("deepseek-v4-pro", "deep", None, None)
    assert (provider.name, model, warning) == ("deep", "deepseek-v4-pro", ())
    provider, model, _ = registry.resolve(None, None, "deep", "deepseek-v4-pro")
    assert (provider.name, model) == ("deep", "deepseek-v4-pro")


async def test_resolve_unknown_provider_hint_falls_back(registry: ProviderRegistry) -> None:
    provider, model, warning = registry.resolve(None, "openai", "deep", "deepseek-v4-pro")
    assert (provider.name, model) == ("deep", "deepseek-v4-pro")
    for said in _in_each_locale(warning):
        assert "openai" in said and "deep" in said


@pytest.mark.parametrize("hint", ["", "   ", "x" * 101, "gpt 4", "model;rm -rf", "模型"])
async def test_resolve_unusable_model_hint_falls_back(registry: ProviderRegistry, hint: str) -> None:
    provider, model, warning = registry.resolve(hint, None, None, "claude-agent")
    assert (provider.name, model) == ("default", "claude-agent")
    for said in _in_each_locale(warning):
        assert "claude-agent" in said and len(said) < 200


async def test_resolve_unknown_agent_provider_uses_default(registry: ProviderRegistry) -> None:
    provider, model, warning = registry.resolve(None, None, "gone", "some-model")
    assert (provider.name, model) == ("default", "claude-main")
    for said in _in_each_locale(warning):
        assert "gone" in said


async def test_offline_registry_accepts_any_model_hint() -> None:
    reg = ProviderRegistry.from_settings(settings(), env={})
    _, model, warning = reg.resolve("anything at all", None)
    assert (model, warning) == ("anything at all", ())


def test_context_windows() -> None:
    assert context_window("claude-sonnet-4-5") == 200_000
    assert context_window("deepseek-v4-pro") == 128_000
    assert context_window("kimi-k2.5") == 256_000
    assert context_window("glm-4.5-air") == 128_000
    assert context_window("glm-4.7") == 200_000
    assert context_window("MiniMax-M2.7") == 200_000
    assert context_window("unknown-model") is None
    assert context_window("unknown-model", 64_000) == 64_000
    assert context_window("claude-x", 50_000) == 50_000


def test_provider_settings_secret_is_not_in_repr() -> None:
    llm = settings(providers={"p": ProviderSettings(preset="qwen", api_key=SecretStr("k-hidden"))})
    assert "k-hidden" not in repr(llm)


@pytest.mark.parametrize(
    ("preset", "model"),
    [("deepseek", "deepseek-flash"), ("lkeap", "glm-5"), ("qianfan", "deepseek-v3.2"), ("moonshot", "kimi-k2.5")],
)
async def test_a_preset_without_a_model_uses_a_model_that_vendor_serves(preset: str, model: str) -> None:
    reg = ProviderRegistry.from_settings(settings(preset=preset, api_key="k"), env={})
    assert reg.default.default_model == model
    await reg.aclose()
    chosen = ProviderRegistry.from_settings(settings(preset=preset, api_key="k", model="mine"), env={})
    assert chosen.default.default_model == "mine"  # a model set by hand wins
    await chosen.aclose()
    named = ProviderRegistry.from_settings(
        settings(api_key="k", providers={"x": {"preset": preset, "api_key": "k2"}}), env={}
    )
    assert named.get("x").default_model == model
    await named.aclose()


def test_the_lkeap_preset_is_tencent_s_anthropic_path() -> None:
    assert PRESETS["lkeap"] == "https://api.lkeap.cloud.tencent.com/api/anthropic"


async def test_start_up_logs_the_endpoint_host_and_model_once_and_never_the_key() -> None:
    with capture_logs() as logs:
        reg = ProviderRegistry.from_settings(settings(preset="deepseek", api_key="sk-secret-1"), env={})
    await reg.aclose()
    found = [e for e in logs if e["event"] == "llm_endpoint"]
    assert found == [
        {"event": "llm_endpoint", "log_level": "info", "provider": "default", "host": "api.deepseek.com:443",
         "model": "deepseek-flash", "preset": "deepseek"}
    ]  # fmt: skip
    assert "sk-secret-1" not in str(logs)


async def test_what_follows_the_warm_up_runs_once_every_provider_has_loaded(fake_llm: FakeAnthropic) -> None:
    """The daemon freezes its start-up objects then: the SDK each provider loads is among them."""
    llm = settings(
        base_url=fake_llm.base_url,
        api_key="k-main",
        model="claude-main",
        providers={"deep": {"preset": "deepseek", "api_key": "k-deep", "model": "deepseek-flash"}},
    )
    reg = ProviderRegistry.from_settings(llm, env={})
    loaded: list[list[bool]] = []
    done = asyncio.Event()

    def then() -> None:
        loaded.append([reg.get(name)._client is not None for name in reg.names])  # type: ignore[attr-defined]
        done.set()

    try:
        reg.start_warm_up(then=then)
        await asyncio.wait_for(done.wait(), 30)
    finally:
        await reg.aclose()
    assert loaded == [[True, True]]
