"""Configuration: agenthub.toml, .env and AGENTHUB_ variables, with one clear line naming a bad key."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from agenthub.config import LONGEST_INTERVAL_S, Settings, load_settings
from agenthub.errors import ConfigError

SECRET = "sk-ant-very-secret-value-123"


def test_defaults_without_any_file() -> None:
    settings = load_settings()
    assert (settings.data_dir, settings.agents_dir, settings.auth_dir, settings.workspace_dir) == (
        Path("data"),
        Path("agents"),
        Path("auth"),
        Path("workspace"),
    )
    assert (settings.session.ttl_s, settings.session.lock_timeout_s, settings.session.restart_confirm_s) == (
        3600.0,
        120.0,
        30.0,
    )
    assert settings.http.port == 8765 and settings.session.max_concurrent_llm == 64


def test_toml_file_then_dotenv_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    Path("agenthub.toml").write_text(
        '[http]\nport = 7000\nhost = "0.0.0.0"\n[llm]\nmodel = "from-toml"\nmax_retries = 5\n'
        '[session]\nttl_s = 10\n[channels.wecom]\ncorp_id = "ww1"\n'
    )
    Path(".env").write_text("AGENTHUB_LLM__MODEL=from-dotenv\nAGENTHUB_HTTP__PORT=7001\nUNRELATED=1\n")
    monkeypatch.setenv("AGENTHUB_HTTP__PORT", "9000")
    settings = load_settings()
    assert settings.http.port == 9000  # environment beats .env beats the file
    assert settings.http.host == "0.0.0.0"
    assert settings.llm.model == "from-dotenv"
    assert settings.llm.max_retries == 5 and settings.session.ttl_s == 10.0
    assert settings.channels["wecom"] == {"corp_id": "ww1"}


def test_explicit_config_path(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.toml"
    path.write_text('data_dir = "/var/lib/agenthub"\nlog_level = "DEBUG"\n')
    settings = load_settings(path)
    assert settings.data_dir == Path("/var/lib/agenthub") and settings.log_level == "debug"
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.toml")


def test_secret_is_not_in_repr_or_dump(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTHUB_LLM__API_KEY", SECRET)
    settings = load_settings()
    assert settings.llm.api_key is not None and settings.llm.api_key.get_secret_value() == SECRET
    assert SECRET not in repr(settings) and SECRET not in settings.model_dump_json()


@pytest.mark.parametrize(
    ("env", "value", "key"),
    [
        ("AGENTHUB_HTTP__PORT", "not-a-port", "http.port"),
        ("AGENTHUB_HTTP__PORT", "70000", "http.port"),
        ("AGENTHUB_SESSION__TTL_S", "-1", "session.ttl_s"),
        ("AGENTHUB_LOG_LEVEL", "chatty", "log_level"),
        ("AGENTHUB_BINDINGS", "{not json", "bindings"),
        ("AGENTHUB_HTTP__TOKENS", SECRET, "http"),
    ],
)
def test_bad_value_names_the_key_and_hides_secrets(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, key: str
) -> None:
    monkeypatch.setenv("AGENTHUB_LLM__API_KEY", SECRET)
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert key in message
    assert "\n" not in message
    assert SECRET not in message and value not in message.replace(key, "")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_bad_value_in_the_file_names_the_key() -> None:
    Path("agenthub.toml").write_text(f'[llm]\napi_key = "{SECRET}"\nmax_tokens = "lots"\n')
    with pytest.raises(ConfigError, match=r"llm\.max_tokens") as caught:
        load_settings()
    assert SECRET not in str(caught.value)


def test_unknown_key_is_refused() -> None:
    Path("agenthub.toml").write_text("[http]\nprot = 1\n")
    with pytest.raises(ConfigError, match=r"http\.prot"):
        load_settings()


def test_invalid_toml_is_one_clear_line() -> None:
    Path("agenthub.toml").write_text(f'[llm]\napi_key = "{SECRET}\n')  # unterminated string
    with pytest.raises(ConfigError, match="not valid TOML") as caught:
        load_settings()
    assert SECRET not in str(caught.value) and "\n" not in str(caught.value)


def test_undecodable_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "agenthub.toml"
    path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(path)


def test_typo_in_dotenv_is_refused_but_foreign_lines_are_ignored() -> None:
    Path(".env").write_text("ANTHROPIC_API_KEY=x\nPATH_EXTRA=1\nAGENTHUB_HTP__PORT=1\n")
    with pytest.raises(ConfigError, match="htp__port"):
        load_settings()


def test_default_model_timeouts_and_retries_fit_inside_the_lock_timeout() -> None:
    from agenthub.config import worst_case_llm_s

    settings = load_settings()
    assert settings.llm.timeout_s < settings.session.lock_timeout_s / 2  # a hung call leaves room for a retry
    assert worst_case_llm_s(settings.llm) <= settings.session.lock_timeout_s  # all retries end before the lock


def test_timeouts_that_outlast_the_lock_timeout_are_warned_about_naming_the_keys() -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        load_settings(llm={"timeout_s": 120.0})
    warnings = [e for e in logs if e["event"] == "config_llm_timeouts_exceed_lock_timeout"]
    assert len(warnings) == 1
    assert "llm.timeout_s" in warnings[0]["hint"] and "session.lock_timeout_s" in warnings[0]["hint"]
    with capture_logs() as logs:
        load_settings()
    assert not [e for e in logs if e["event"] == "config_llm_timeouts_exceed_lock_timeout"]


def test_store_defaults_to_files_with_a_15_s_lease() -> None:
    settings = load_settings()
    assert (settings.store.backend, settings.store.dsn, settings.store.lease_s) == ("files", None, 15.0)


def test_store_dsn_comes_from_the_environment_and_stays_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = f"postgresql://agenthub:{SECRET}@db.example/agenthub"
    monkeypatch.setenv("AGENTHUB_STORE__BACKEND", "postgres")
    monkeypatch.setenv("AGENTHUB_STORE__DSN", dsn)
    settings = load_settings()
    assert settings.store.backend == "postgres"
    assert settings.store.dsn is not None and settings.store.dsn.get_secret_value() == dsn
    assert SECRET not in repr(settings) and SECRET not in settings.model_dump_json()


@pytest.mark.parametrize("dsn", [None, "", "   "])
def test_postgres_without_a_dsn_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, dsn: str | None) -> None:
    monkeypatch.setenv("AGENTHUB_STORE__BACKEND", "postgres")
    if dsn is not None:
        monkeypatch.setenv("AGENTHUB_STORE__DSN", dsn)
    with pytest.raises(ConfigError, match=r"store.*AGENTHUB_STORE__DSN") as caught:
        load_settings()
    assert "\n" not in str(caught.value)


def test_an_unknown_store_backend_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTHUB_STORE__BACKEND", "sqlite")
    with pytest.raises(ConfigError, match=r"store\.backend"):
        load_settings()


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[http]\nprot = 9000\n", 'http.prot: unknown key (did you mean "http.port"?)'),
        ('[llm]\nmodle = "x"\n', 'llm.modle: unknown key (did you mean "llm.model"?)'),
        ('log_levle = "info"\n', 'log_levle: unknown key (did you mean "log_level"?)'),
    ],
)
def test_an_unknown_key_suggests_the_nearest_one(toml: str, expected: str) -> None:
    Path("agenthub.toml").write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert expected in str(caught.value)
    assert "Extra inputs are not permitted" not in str(caught.value)


def test_an_unknown_key_far_from_every_known_one_suggests_nothing() -> None:
    Path("agenthub.toml").write_text("[http]\nzzzzzz = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert "http.zzzzzz: unknown key" in str(caught.value) and "did you mean" not in str(caught.value)


def test_a_preset_in_the_file_without_a_model_takes_the_vendor_s_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from agenthub.llm.endpoint import default_endpoint

    Path("agenthub.toml").write_text('[llm]\npreset = "deepseek"\n')
    assert default_endpoint(load_settings().llm, env={}).model == "deepseek-flash"
    monkeypatch.setenv("AGENTHUB_LLM__MODEL", "deepseek-v4-pro")
    assert default_endpoint(load_settings().llm, env={}).model == "deepseek-v4-pro"


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("AGENTHUB_HTTP__TOKENS", "http.tokens"),
        ("AGENTHUB_BINDINGS", "bindings"),
        ("agenthub_http__tokens", "http.tokens"),
    ],
)
def test_a_variable_that_must_be_json_and_is_not_is_named(monkeypatch: pytest.MonkeyPatch, name: str, key: str) -> None:
    monkeypatch.setenv("AGENTHUB_HTTP__HOST", "127.0.0.1")  # not JSON either, and rightly so: a plain string
    monkeypatch.setenv(name, SECRET)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"invalid configuration: {key}: {name.upper()} must be JSON (a list or table, e.g. '[\"…\"]' or '{{…}}')"
    )


def test_a_dotenv_line_that_must_be_json_and_is_not_is_named() -> None:
    Path(".env").write_text(f"AGENTHUB_HTTP__TOKENS={SECRET}\n")
    with pytest.raises(ConfigError, match=r"^invalid configuration: http\.tokens: AGENTHUB_HTTP__TOKENS must be JSON"):
        load_settings()


def _float_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """The dotted keys of every float setting under `model`, through nested sections."""
    keys = []
    for name, field in model.model_fields.items():
        args = typing.get_args(field.annotation) or (field.annotation,)
        section = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if section is not None:
            keys += _float_keys(section, f"{prefix}{name}.")
        elif float in args:
            keys.append(prefix + name)
    return keys


FLOAT_KEYS = _float_keys(Settings)


def test_the_float_settings_are_found() -> None:
    assert {"store.lease_s", "session.lock_timeout_s", "http.idempotency_window_s", "budgets.warn_at"} <= set(
        FLOAT_KEYS
    )


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity"])
@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_a_float_setting_that_is_not_finite_is_one_line_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    monkeypatch.setenv("AGENTHUB_" + key.upper().replace(".", "__"), value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value).startswith(f"invalid configuration: {key}: ")
    assert "\n" not in str(caught.value) and caught.value.__cause__ is None


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_an_infinite_lease_in_the_file_is_refused(value: str) -> None:
    Path("agenthub.toml").write_text(f"[store]\nlease_s = {value}\n")
    with pytest.raises(ConfigError, match=r"^invalid configuration: store\.lease_s: .*finite"):
        load_settings()


def test_a_price_that_is_not_finite_is_refused() -> None:
    Path("agenthub.toml").write_text('[llm.prices."m"]\ninput = inf\n')
    with pytest.raises(ConfigError, match=r"^invalid configuration: llm\.prices\.m\.input: "):
        load_settings()


@pytest.mark.parametrize("key", ["store.lease_s", "session.lock_timeout_s", "http.idempotency_window_s"])
def test_a_duration_that_reaches_postgresql_intervals_is_bounded(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """Beyond `LONGEST_INTERVAL_S` `now() + x * interval '1 second'` would fail at run time ("out of range")."""
    monkeypatch.setenv("AGENTHUB_" + key.upper().replace(".", "__"), "1e300")
    with pytest.raises(ConfigError, match=rf"^invalid configuration: {re.escape(key)}: must be at most 366 days \("):
        load_settings()
    monkeypatch.setenv("AGENTHUB_" + key.upper().replace(".", "__"), str(LONGEST_INTERVAL_S))
    assert load_settings() is not None
