"""The text catalogue, one module per area; `merged()` joins them and refuses a key defined twice."""

from __future__ import annotations

from collections.abc import Mapping

from agenthub.i18n.catalogue import channels, cli, commands, core, feishu, forget, jobs, llm, media, memory, usage

AREAS: tuple[Mapping[str, Mapping[str, str]], ...] = (
    core.TEXTS,
    media.TEXTS,
    commands.TEXTS,
    llm.TEXTS,
    memory.TEXTS,
    channels.TEXTS,
    cli.TEXTS,
    feishu.TEXTS,
    forget.TEXTS,
    jobs.TEXTS,
    usage.TEXTS,
)
"""Every area module's `TEXTS`; an area added later is listed here."""


def merged() -> dict[str, dict[str, str]]:
    texts: dict[str, dict[str, str]] = {}
    for area in AREAS:
        for key, entry in area.items():
            if key in texts:
                raise RuntimeError(f"text key defined twice: {key}")
            texts[key] = dict(entry)
    return texts
