""" "Did you mean …": the nearest known key for a configuration key pydantic refused as unknown."""

from __future__ import annotations

import difflib
import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel


def _model_of(annotation: object) -> type[BaseModel] | None:
    """The model class of a field's annotation (through `X | None`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def known_keys(model: type[BaseModel], path: Sequence[str | int]) -> list[str] | None:
    """The keys (field names and aliases) of the section at `path` under `model`, or None if it is not a model."""
    current: type[BaseModel] | None = model
    for part in path:
        if current is None:
            return None
        field = current.model_fields.get(str(part))
        current = _model_of(field.annotation) if field is not None else None
    if current is None:
        return None
    keys = set(current.model_fields)
    keys.update(f.alias for f in current.model_fields.values() if f.alias)
    return sorted(keys)


def did_you_mean(model: type[BaseModel], loc: Sequence[str | int]) -> str:
    """` (did you mean "port"?)` for an unknown key at `loc`, or "" when nothing is close."""
    if not loc:
        return ""
    keys = known_keys(model, loc[:-1])
    if not keys:
        return ""
    close = difflib.get_close_matches(str(loc[-1]).lower(), keys, n=1, cutoff=0.6)
    if not close:
        return ""
    prefix = ".".join(str(p) for p in loc[:-1])
    return f' (did you mean "{prefix + "." if prefix else ""}{close[0]}"?)'


def problem(model: type[BaseModel], item: Mapping[str, Any]) -> str:
    """What is wrong with the key of one pydantic error `item` under `model`: `unknown key (did you mean …?)`, or
    the validator's own words without pydantic's `Value error, ` prefix."""
    if item["type"] == "extra_forbidden":
        return "unknown key" + did_you_mean(model, item["loc"])
    days = _days_bound(item)
    if days is not None:
        return f"must be at most {days} days ({days * DAY_S} seconds)"
    return str(item["msg"]).removeprefix("Value error, ")


DAY_S = 86_400


def _days_bound(item: Mapping[str, Any]) -> int | None:
    """The bound in whole days of a duration in seconds (a key ending in `_s`) that is over it; None otherwise."""
    key = str(item["loc"][-1]) if item["loc"] else ""
    limit = item.get("ctx", {}).get("le")
    if item["type"] != "less_than_equal" or not key.endswith("_s") or not isinstance(limit, int | float):
        return None
    return int(limit) // DAY_S if limit >= DAY_S and limit % DAY_S == 0 else None


def _is_complex(annotation: object) -> bool:
    """A list, table or section: what an environment variable gives as JSON."""
    if _model_of(annotation) is not None:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_is_complex(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return origin in (list, dict, tuple, set, frozenset) or annotation in (list, dict, tuple, set, frozenset)


def _annotation_at(model: type[BaseModel], path: Sequence[str]) -> object:
    current: object = model
    for part in path:
        section = _model_of(current)
        if section is None or part not in section.model_fields:
            return None
        current = section.model_fields[part].annotation
    return current


def not_json(model: type[BaseModel], prefix: str, variables: Mapping[str, str | None]) -> tuple[str, str] | None:
    """(key, variable) of the first of `variables` (`PREFIX_A__B` names, any case) that sets a list, table or
    section of `model` to something that is not JSON, the way pydantic-settings reads them; else None."""
    for name, value in variables.items():
        if value is None or not name.upper().startswith(prefix.upper()):
            continue
        path = name[len(prefix) :].lower().split("__")
        if not _is_complex(_annotation_at(model, path)):
            continue
        try:
            json.loads(value)
        except ValueError:
            return ".".join(path), name.upper()
    return None
