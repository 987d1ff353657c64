"""Channel configuration rules: the cred_id pattern, the locale check and `ConfigError`s that name keys only."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agenthub.config.hints import problem
from agenthub.errors import ConfigError
from agenthub.i18n import CHANNEL_DEFAULTS, Locale, normalise_locale, system_locale

CRED_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
"""Lowercase only: environment variable names are case-insensitive, so `…__APPS__MAIN__SECRET` names `main`; no
`:`, `/` or `.`, so a cred_id is safe in route paths, dedup keys and state file names."""
_CRED_ID = re.compile(CRED_ID_PATTERN)

Model = TypeVar("Model", bound=BaseModel)


def check_cred_ids(value: dict[str, Any]) -> dict[str, Any]:
    """A `field_validator` for a credentials table: every key must match `CRED_ID_PATTERN`."""
    for cred_id in value:
        if not _CRED_ID.fullmatch(cred_id):
            raise ValueError(f"cred_id {cred_id!r} must be 1-64 of lowercase a-z, 0-9, _ and - (led by a-z or 0-9)")
    return value


def check_locale(value: str | None) -> str | None:
    """A `field_validator` for `locale`: unset, or one the catalogue has."""
    if value is not None and normalise_locale(value) is None:
        raise ValueError('must be "zh-CN" or "en"')
    return value


def texts_locale(configured: str | None, channel: str) -> Locale:
    """The locale of the texts a channel writes itself: its `locale`, else the channel's default (zh-CN for the
    Chinese platforms, the system's otherwise), as the gateway's `i18n.channel_locale` reads the same key."""
    return normalise_locale(configured) or CHANNEL_DEFAULTS.get(channel) or system_locale()


def parse_table(model: type[Model], raw: Mapping[str, Any], channel: str) -> Model:
    """`raw` (the `[channels.<channel>]` table) validated as `model`; else a `ConfigError` listing each problem
    as `channels.<channel>.<key path>: what is wrong`, never the value (it may be a secret)."""
    try:
        return model.model_validate(dict(raw))
    except ValidationError as e:
        raise config_error(channel, e, model) from None


def config_error(channel: str, error: ValidationError, model: type[BaseModel]) -> ConfigError:
    """The `ConfigError` for a validation failure of `[channels.<channel>]` (read as `model`)."""
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        key = ".".join(["channels", channel, *(str(part) for part in item["loc"])])
        problems.append(f"{key}: {problem(model, item)}")
    return ConfigError("invalid configuration: " + "; ".join(problems))
