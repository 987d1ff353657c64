"""A sender id the key rules refuse names its profiles by a digest that no ordinary sender id can also name."""

from __future__ import annotations

import hashlib
from pathlib import Path

from agenthub.agent.definition import AgentConfig, AgentDefinition
from agenthub.memory.files import MemoryFiles
from agenthub.session_keys import PERSON_DIGEST_PREFIX, person_key, session_key

ODD = "a\\b"
SECRET = "- a\\b's private fact: ORCHID-7731\n"


def _lookalike(sender: str) -> str:
    """An ordinary sender id spelled as the digest name of `sender` (a platform or token name may be any text)."""
    return PERSON_DIGEST_PREFIX + hashlib.sha256(sender.encode("utf-8")).hexdigest()[:32]


async def test_an_ordinary_id_spelled_as_an_odd_id_s_digest_neither_reads_nor_forgets_its_profiles(
    tmp_path: Path,
) -> None:
    agent = AgentDefinition("default", AgentConfig.model_validate({"memory": {"user_profile": "per_user"}}), "p")
    files = MemoryFiles(tmp_path / "data", tmp_path / "auth")
    chat = session_key("default", "wecom", "dm")
    odd = files.profile_name(agent, chat, ODD, "private")
    assert odd is not None
    await files.writer.update(odd, lambda _old: SECRET)

    mimic = _lookalike(ODD)
    theirs = files.profile_name(agent, chat, mimic, "private")
    assert theirs is not None
    assert person_key("default", "wecom", mimic) != person_key("default", "wecom", ODD)
    assert theirs != odd
    assert await files.read(theirs) == ""  # the odd sender's fact is not in the look-alike's prompt
    assert odd not in await files.person_profiles(agent, "wecom", mimic)  # their "forget me" leaves it alone
    assert await files.read(odd) == SECRET
    assert odd in await files.person_profiles(agent, "wecom", ODD)
