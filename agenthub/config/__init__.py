"""Typed configuration: `agenthub.toml`, then `.env`, then `AGENTHUB_…` variables (`__` nests)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import structlog
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from agenthub.config.hints import not_json, problem
from agenthub.errors import ConfigError

log = structlog.get_logger(__name__)

DEFAULT_CONFIG_FILE = Path("agenthub.toml")

Backend = Literal["files", "postgres"]
"""The storage backends `[store] backend` may name (each has its factory in `agenthub.storage.stores.BACKENDS`)."""


LONGEST_INTERVAL_S = 366 * 86_400.0
"""The bound of a duration that reaches a PostgreSQL interval (`now() + x * interval '1 second'`): a year, well
inside the range of timestamps (beyond it the store would fail at run time rather than at start-up)."""


class _Section(BaseModel):
    """A `[section]`: unknown keys refused, and so is a float that is not finite (`inf`, `nan`: TOML and the
    environment both spell them, and no duration, share or price means anything with them)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SessionSettings(_Section):
    """Session lifetimes, locks and concurrency."""

    ttl_s: float = Field(3600.0, gt=0, description="idle time after which the in-memory Session is dropped")
    lock_timeout_s: float = Field(
        120.0, gt=0, le=LONGEST_INTERVAL_S, description="a turn holding the lock longer is cancelled"
    )
    restart_confirm_s: float = Field(30.0, gt=0, description="window for the second /restart")
    max_concurrent_llm: int = Field(64, ge=1, description="global cap on concurrent LLM calls")
    max_queued: int = Field(
        200, ge=1, description="against abuse: messages a chat may have waiting (they go as one turn); more are refused"
    )
    fsync: bool = Field(True, description="fsync every history append")


class ProviderSettings(_Section):
    """One Anthropic-compatible endpoint; `preset` fills in a known vendor's base URL."""

    preset: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str | None = None


class PriceSettings(_Section):
    """What one model costs, per million tokens of each kind (`[llm.prices."<model>"]`); makes usage views show cost."""

    input: float = Field(0.0, ge=0)
    output: float = Field(0.0, ge=0)
    cache_read: float = Field(0.0, ge=0)
    cache_write: float = Field(0.0, ge=0)
    currency: str = Field("USD", min_length=1, max_length=12)


class LLMSettings(_Section):
    """The default model endpoint; `ANTHROPIC_API_KEY` / `ANTHROPIC_BASE_URL` fill in what is unset."""

    preset: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "claude-sonnet-4-6"
    max_tokens: int = Field(4096, ge=1)
    timeout_s: float = Field(
        25.0, gt=0, description="read timeout of one model call; with its retries it must end before the lock timeout"
    )
    connect_timeout_s: float = Field(10.0, gt=0)
    max_retries: int = Field(3, ge=0, description="retries on 429/529/5xx/timeouts")
    retry_base_s: float = Field(0.5, ge=0, description="first backoff delay, doubled per retry")
    retry_max_s: float = Field(8.0, ge=0)
    max_tool_iterations: int = Field(12, ge=1)
    context_window: int | None = Field(None, ge=1000, description="for models not in the built-in table")
    offline: bool = Field(False, description="force the offline provider even when a key is set")
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    prices: dict[str, PriceSettings] = Field(default_factory=dict, description="per model: cost per million tokens")


class MemorySettings(_Section):
    """Thresholds of the memory layer; per-agent `memory.*` in agent.json overrides them."""

    consolidate_at_tokens: int | None = Field(None, ge=1000, description="default: 40% of the window, else 80000")
    consolidate_window_ratio: float = Field(0.4, gt=0, le=0.95)
    keep_recent: int = Field(20, ge=2)
    l3_interval_s: float = Field(7200.0, gt=0)
    l3_sessions: int = Field(10, ge=1)
    l3_messages: int = Field(30, ge=1)
    l3_message_chars: int = Field(200, ge=20)
    memory_max_chars: int = Field(8000, ge=500)
    user_max_chars: int = Field(4000, ge=500)
    memory_budget_tokens: int = Field(2000, ge=100)
    user_budget_tokens: int = Field(1000, ge=100)
    autocompact_interval_s: float = Field(600.0, gt=0)
    autocompact_idle_s: float = Field(600.0, ge=0)
    autocompact_min_messages: int = Field(100, ge=2)
    autocompact_keep: int = Field(20, ge=2)
    autocompact_summary: bool = False
    flush_before_compaction: bool = Field(
        True, description="before a summary replaces old messages, merge their durable facts into MEMORY.md"
    )
    consolidate_retry_after_s: float = Field(
        600.0, ge=0, description="after a failed summary, wait this long (or 10 more messages); 0: no wait"
    )
    background_timeout_s: float = Field(
        120.0, gt=0, description="bounds each background model call: L2 summary and flush, AutoCompact summary, L3"
    )
    old_tool_result_chars: int = Field(
        4000, ge=0, description="send tool results older than the last 2 user turns cut to this; 0: never"
    )
    large_tool_result_chars: int = Field(
        80_000, ge=8000, description="a longer tool result is moved to workspace/<agent>/large_tool_results/"
    )
    recall: Literal["auto", "off"] = Field(
        "off", description="auto: before each turn, passages of other turns the user's message recalls go with it"
    )
    recall_tokens: int = Field(600, ge=50, description="bound of the recalled passages attached to one turn")
    recall_timeout_s: float = Field(1.0, gt=0, description="a recall search taking longer is dropped for that turn")


class MediaSettings(_Section):
    """Images and files users send (design §14)."""

    max_download_bytes: int = Field(
        20 * 1024 * 1024, ge=1024, description="a larger inbound file or image is refused with a clear reply"
    )
    download_timeout_s: float = Field(30.0, gt=0, description="bounds each media download from a platform")
    max_image_bytes: int = Field(
        3_750_000, ge=10_000, description="images are re-encoded/resized to at most this many bytes for the model"
    )
    max_image_edge_px: int = Field(1568, ge=64, description="images are resized so the longer edge is at most this")


class HTTPSettings(_Section):
    """The daemon's one HTTP server (API, console, webhooks)."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    tokens: list[SecretStr] = Field(default_factory=list, description="bearer tokens besides auth/tokens.json")
    max_body_bytes: int = Field(1_048_576, ge=1024)
    drain_timeout_s: float = Field(30.0, ge=0)
    header_timeout_s: float = Field(
        15.0, gt=0, description="a connection sends a whole request head within this of opening or of its last reply"
    )
    body_timeout_s: float = Field(60.0, gt=0, description="a request body arrives whole within this of its head")
    max_connections: int | None = Field(
        None, ge=1, description="open connections at most; default: the open-file limit minus room for the rest"
    )
    idempotency_window_s: float = Field(
        86_400.0,
        ge=60,
        le=LONGEST_INTERVAL_S,
        description="how long a chat request's Idempotency-Key and its answer are kept",
    )


class SchedulerSettings(_Section):
    """Scheduled jobs (`manage_cron_jobs`, `/jobs`): defaults and limits."""

    enabled: bool = True
    timezone: str = Field(
        "Asia/Shanghai",
        description="IANA zone of jobs that name none, of usage days and of every time shown to users and the model",
    )
    catch_up_s: float = Field(600.0, ge=0, description="a job missed while down runs once on start if less late")
    max_jobs_per_chat: int = Field(50, ge=1)
    min_interval_s: float = Field(60.0, ge=60, description="shortest gap between two runs of a recurring job")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder of the database ("America")
            raise ValueError("not an IANA time zone name such as Asia/Shanghai") from None
        return value

    @property
    def zone(self) -> ZoneInfo:
        """`timezone` as a zone: the calendar and clock of the chats (days of usage, jobs, the times shown to users
        and the model, what "yesterday" means in a question)."""
        return ZoneInfo(self.timezone)


class BudgetLimits(_Section):
    """Token limits (the four kinds added up; 0: none) per sender, chat and agent, per day and per month."""

    user_day: int = Field(0, ge=0)
    user_month: int = Field(0, ge=0)
    chat_day: int = Field(0, ge=0)
    chat_month: int = Field(0, ge=0)
    agent_day: int = Field(0, ge=0)
    agent_month: int = Field(0, ge=0)
    warn_at: float = Field(0.8, gt=0, le=1, description="the first turn past this share of a limit gets a notice")


class BudgetSettings(BudgetLimits):
    """`[budgets]` (design §15); `agent.json` "budgets" overrides them per agent."""

    exempt: list[str] = Field(default_factory=list, description='"channel:sender" never refused (still counted)')


class StoreSettings(_Section):
    """Where state lives (design §12): the files of §4, or PostgreSQL for several instances on one deployment."""

    backend: Backend = "files"
    dsn: SecretStr | None = Field(None, description="postgres: set it as AGENTHUB_STORE__DSN; a secret, never logged")
    lease_s: float = Field(
        15.0, gt=0, le=LONGEST_INTERVAL_S, description="postgres: a dead instance's sessions are taken over after this"
    )

    @model_validator(mode="after")
    def _postgres_needs_a_dsn(self) -> StoreSettings:
        if self.backend == "postgres" and (self.dsn is None or not self.dsn.get_secret_value().strip()):
            raise ValueError('backend "postgres" needs a dsn: set AGENTHUB_STORE__DSN')
        return self


class EmbeddingsSettings(_Section):
    """`[search.embeddings]`: an OpenAI-compatible `/v1/embeddings` endpoint whose vectors are fused with the
    lexical ranking; off while `base_url` or `model` is unset."""

    base_url: str | None = Field(None, pattern=r"^https?://", description="e.g. https://api.example.com (/v1 added)")
    model: str = ""
    api_key: SecretStr | None = Field(None, description="AGENTHUB_SEARCH__EMBEDDINGS__API_KEY")
    api_key_env: str | None = Field(None, min_length=1, description="or the name of a variable holding the key")
    dims: int | None = Field(None, ge=1, le=16384, description="asked of the endpoint as `dimensions` when set")
    batch: int = Field(32, ge=1, le=2048, description="texts per request when indexing")
    timeout_s: float = Field(15.0, gt=0, description="bound of one indexing request")
    query_timeout_s: float = Field(1.0, gt=0, description="bound of embedding a query; slower: lexical only")
    retry_after_s: float = Field(60.0, ge=0, description="after a failure the endpoint is left alone this long")
    max_text_chars: int = Field(4000, ge=100, description="a longer passage is embedded by its start")

    @property
    def enabled(self) -> bool:
        return bool(self.base_url and self.model)


class SearchSettings(_Section):
    """Memory search (`memory_search`, recall)."""

    embeddings: EmbeddingsSettings = Field(default_factory=EmbeddingsSettings)


class Settings(BaseSettings):
    """All of AgentHub's configuration; see docs/configuration.md."""

    model_config = SettingsConfigDict(
        env_prefix="AGENTHUB_",
        env_nested_delimiter="__",
        env_file=".env",
        env_file_encoding="utf-8",
        dotenv_filtering="match_prefix",  # .env may hold ANTHROPIC_API_KEY etc.; only AGENTHUB_* lines are ours
        extra="forbid",
        allow_inf_nan=False,
        validate_default=True,
    )

    data_dir: Path = Path("data")
    agents_dir: Path = Path("agents")
    auth_dir: Path = Path("auth")
    workspace_dir: Path = Path("workspace")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    default_agent: str = "default"
    bindings: dict[str, str] = Field(default_factory=dict, description='"channel" or "channel:cred_id" → agent name')
    session: SessionSettings = Field(default_factory=SessionSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    media: MediaSettings = Field(default_factory=MediaSettings)
    http: HTTPSettings = Field(default_factory=HTTPSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    budgets: BudgetSettings = Field(default_factory=BudgetSettings)
    channels: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="[channels.<name>] tables, each validated by its channel"
    )

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=_active_toml.get("path"))
        return (init_settings, env_settings, dotenv_settings, toml)


_active_toml: dict[str, Path | None] = {"path": None}


def load_settings(config_path: Path | None = None, **overrides: Any) -> Settings:
    """Load and validate settings; raise `ConfigError` with one line naming the bad key (never its value)."""
    path = config_path if config_path is not None else DEFAULT_CONFIG_FILE
    if config_path is not None and not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    if path.is_file():
        _check_toml_syntax(path)
    _active_toml["path"] = path if path.is_file() else None
    try:
        settings = Settings(**overrides)
    except ValidationError as e:
        raise ConfigError(describe_validation_error(e)) from None
    except SettingsError as e:  # a complex value (JSON in an env var) that does not parse
        raise ConfigError(_not_json_text(e)) from None
    finally:
        _active_toml["path"] = None
    warn_about_timeouts(settings)
    return settings


RETRY_JITTER = 0.1
"""The provider adds up to 10 % to each backoff delay (`RetryPolicy.jitter`)."""


def worst_case_llm_s(llm: LLMSettings) -> float:
    """How long one model call can take when every attempt hangs until the read timeout: all attempts plus the
    backoff delays between them."""
    delays = sum(min(llm.retry_max_s, llm.retry_base_s * 2.0**i) for i in range(llm.max_retries))
    return (llm.max_retries + 1) * llm.timeout_s + delays * (1 + RETRY_JITTER)


def warn_about_timeouts(settings: Settings) -> None:
    """A hung call and its retries should end before the session lock timeout cancels the turn; if they cannot,
    the retries are wasted (the user gets the lock timeout instead). Warn, naming the keys."""
    worst, lock = worst_case_llm_s(settings.llm), settings.session.lock_timeout_s
    if worst > lock:
        log.warning(
            "config_llm_timeouts_exceed_lock_timeout",
            worst_case_s=round(worst, 1),
            lock_timeout_s=lock,
            hint="lower llm.timeout_s or llm.max_retries, or raise session.lock_timeout_s: "
            "(llm.max_retries + 1) × llm.timeout_s + backoff must stay below session.lock_timeout_s",
        )


def _check_toml_syntax(path: Path) -> None:
    try:
        tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file: {e.strerror}") from None


def _not_json_text(error: SettingsError) -> str:
    """The variable (environment, then .env) that should hold JSON and does not, named with its key."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    for variables in (dict(os.environ), dict(DotEnvSettingsSource(Settings).env_vars)):
        found = not_json(Settings, prefix, variables)
        if found is not None:
            key, name = found
            return f"invalid configuration: {key}: {name} must be JSON (a list or table, e.g. '[\"…\"]' or '{{…}}')"
    return f"invalid configuration: {error}"


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem, `key.path: what is wrong`, with the offending input left out."""
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        key = ".".join(str(part) for part in item["loc"]) or "(root)"
        problems.append(f"{key}: {problem(Settings, item)}")
    return "invalid configuration: " + "; ".join(problems)
