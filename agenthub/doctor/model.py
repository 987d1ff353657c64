"""The model endpoint check: reachable, key accepted, model known, with one cheap call (max_tokens 1)."""

from __future__ import annotations

from agenthub.config import LLMSettings
from agenthub.doctor import Check, fail, ok, warn
from agenthub.errors import ConfigError, LLMError, ModelNotFoundError
from agenthub.llm.endpoint import Endpoint, default_endpoint, named_endpoint

PROBE_TIMEOUT_S = 15.0
KEY_HINT = "set AGENTHUB_LLM__API_KEY (or ANTHROPIC_API_KEY), and llm.preset or llm.base_url for another vendor"


async def model_checks(llm: LLMSettings) -> list[Check]:
    """The default endpoint and every `[llm.providers.*]` one; offline (no key) is a warning, not a failure."""
    try:
        endpoints = {"model": default_endpoint(llm)}
        for name, provider in llm.providers.items():
            endpoints[f"model {name}"] = named_endpoint(name, provider, llm)
    except ConfigError as e:
        return [fail("model", str(e), "fix that key in agenthub.toml or the environment")]
    main = endpoints["model"]
    missing = [name for name, endpoint in endpoints.items() if not endpoint.has_key and endpoint is not main]
    if llm.offline or not main.has_key:
        why = "llm.offline is set" if llm.offline else "no API key is configured"
        return [warn("model", f"offline: {why}; the offline stand-in answers instead of {main.host}",
                     KEY_HINT)]  # fmt: skip
    checks = [fail(name, f"{endpoints[name].host}: no api_key", f"set llm.providers.{name[6:]}.api_key")
              for name in missing]  # fmt: skip
    return checks + [await probe(name, e) for name, e in endpoints.items() if name not in missing]


async def probe(name: str, endpoint: Endpoint) -> Check:
    """One Messages API call of one output token to `endpoint`."""
    from agenthub.llm.anthropic_provider import AnthropicProvider, RetryPolicy
    from agenthub.llm.types import LLMRequest

    where = endpoint.host
    provider = AnthropicProvider(
        endpoint, name=name, timeout_s=PROBE_TIMEOUT_S, connect_timeout_s=PROBE_TIMEOUT_S, retry=RetryPolicy(0)
    )
    request = LLMRequest(endpoint.model, [], [{"role": "user", "content": "ping"}], [], 1, purpose="doctor")
    try:
        await provider.complete(request)
    except ModelNotFoundError:
        hint = "set llm.model to a model this vendor serves (see its model list)"
        return fail(name, f"{where}: the key is accepted but model {endpoint.model!r} is unknown there", hint)
    except LLMError as e:
        said = str(e)
        return fail(name, said if where in said else f"{where}: {said}", _hint(e))
    finally:
        await provider.aclose()
    return ok(name, f"{where} answered: key accepted, model {endpoint.model!r} known")


def _hint(error: LLMError) -> str:
    kind = error.user_text.key
    if kind == "llm.auth":
        return "the key was refused: check AGENTHUB_LLM__API_KEY, and that it belongs to this vendor's endpoint"
    if kind == "llm.billing":
        return "the account has no credit left: top it up at the vendor"
    if kind in ("llm.network", "llm.timeout"):
        return "check llm.base_url / llm.preset, the network, DNS and any proxy (HTTPS_PROXY)"
    return "see the vendor's answer above"
