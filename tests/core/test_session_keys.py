"""Session keys: the factory rejects traversal material, and accepted keys map injectively inside sessions/."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agenthub.errors import InvalidIdError, StorageError
from agenthub.session_keys import SessionKey, key_from_file_stem, person_key, session_key, validate_part
from agenthub.storage.paths import AgentLayout, inside

HYPO = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

NASTY = [
    "../",
    "..\\",
    "..",
    "a/../b",
    "%2e%2e%2f",
    "%2E%2E%2F",
    "%252e%252e%252f",
    "%25252e%25252e%25252f",
    "..%2f",
    "%2e%2e\\",
    "a\x00b",
    "\x00",
    "C:",
    "c:\\windows",
    "C:evil",
    "/etc/passwd",
    "\\\\server\\share",
    "%2fetc%2fpasswd",
    "a\nb",
    "a\u202eb",
    "x" * 129,
    "",
    " padded",
]

# Traversal fragments hypothesis mixes into arbitrary text.
FRAGMENTS = st.sampled_from(
    ["../", "..\\", "..", "/", "\\", "%2e", "%2f", "%5c", "%252e", "%252f", "%00", "\x00", "C:", ":", "_", "~", "%"]
)
PART = st.lists(st.one_of(st.text(max_size=12), FRAGMENTS), max_size=8).map("".join)
LONG = st.text(min_size=100, max_size=400)


@pytest.mark.parametrize("bad", NASTY)
@pytest.mark.parametrize("where", ["agent", "channel", "chat_id"])
def test_factory_rejects_traversal_material(bad: str, where: str) -> None:
    parts = {"agent": "reviewer", "channel": "wecom", "chat_id": "zhangsan", where: bad}
    with pytest.raises(InvalidIdError):
        session_key(**parts)


def test_agent_part_rejects_colon_and_dot_names() -> None:
    for agent in ["a:b", ".", ".hidden"]:
        with pytest.raises(InvalidIdError):
            session_key(agent, "http", "x")
    assert str(session_key("a", "http", "u7:42")) == "a:http:u7:42"  # the chat id may hold ':'


def test_contract_file_name() -> None:
    assert session_key("reviewer", "wecom", "zhangsan").file_stem == "reviewer_wecom_zhangsan"


def test_colon_and_underscore_chat_ids_get_different_files(tmp_path: Path) -> None:
    layout = AgentLayout(tmp_path, "a")
    colon, underscore = session_key("a", "wecom", "u7:42"), session_key("a", "wecom", "u7_42")
    assert layout.history_file(colon) != layout.history_file(underscore)
    assert key_from_file_stem(colon.file_stem) == colon
    assert key_from_file_stem(underscore.file_stem) == underscore


def _accepted(agent: str, channel: str, chat_id: str) -> SessionKey | None:
    try:
        return session_key(agent, channel, chat_id)
    except InvalidIdError:
        return None


@HYPO
@given(agent=PART, channel=PART, chat_id=st.one_of(PART, LONG))
@example(agent="a", channel="b", chat_id="%2e%2e%2f")
@example(agent="a", channel="b", chat_id="~2e~2e")
def test_accepted_keys_stay_inside_sessions_dir(tmp_path: Path, agent: str, channel: str, chat_id: str) -> None:
    key = _accepted(agent, channel, chat_id)
    if key is None:
        return
    sessions = (tmp_path / key.agent / "sessions").resolve()
    layout = AgentLayout(tmp_path, key.agent)
    assert layout.history_file(key).parent == sessions
    assert layout.meta_file(key).parent == sessions
    assert layout.archive_file(key).parent == sessions / "archive"
    assert len(layout.meta_file(key).name.encode()) <= 255
    assert key_from_file_stem(key.file_stem) == key  # the mapping is invertible, hence injective
    assert SessionKey.parse(str(key)) == key


@HYPO
@given(a=st.tuples(PART, PART, PART), b=st.tuples(PART, PART, PART))
@example(a=("x", "y", "u7:42"), b=("x", "y", "u7_42"))
@example(a=("x", "y_z", "q"), b=("x", "y", "z_q"))
@example(a=("x", "y", "a~3ab"), b=("x", "y", "a:b"))
def test_mapping_is_injective(a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    ka, kb = _accepted(*a), _accepted(*b)
    if ka is None or kb is None:
        return
    assert (ka == kb) == (ka.file_stem == kb.file_stem)


@HYPO
@given(name=st.one_of(PART, LONG))
@example(name="..")
@example(name="../x")
@example(name="/etc/passwd")
def test_storage_check_never_leaves_its_directory(tmp_path: Path, name: str) -> None:
    base = tmp_path / "sessions"
    try:
        path = inside(base, name)
    except (StorageError, OSError):
        return  # refused (or a name the OS cannot hold): either way nothing outside is opened
    assert path.parent == base.resolve()


def test_storage_check_refuses_a_symlink_out(tmp_path: Path) -> None:
    base = tmp_path / "sessions"
    base.mkdir()
    (base / "evil.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(StorageError):
        inside(base, "evil.jsonl")


def test_layout_refuses_a_foreign_agents_key(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        AgentLayout(tmp_path, "a").history_file(session_key("b", "http", "x"))


@pytest.mark.parametrize("stem", ["a_b", "a_b_c~zz", "a_b_c~", "a_b_c~2f", "_b_c", "a_b_c~5F"])
def test_foreign_file_names_are_not_keys(stem: str) -> None:
    assert key_from_file_stem(stem) is None


def test_very_long_ids_are_refused_clearly() -> None:
    with pytest.raises(InvalidIdError, match="longer"):
        session_key("a", "http", "x" * 10_000)
    with pytest.raises(InvalidIdError, match="too long"):
        session_key("a", "http", "语" * 100)  # 100 characters, but 300 bytes of file name


def test_a_remembered_check_refuses_a_bad_part_every_time_and_names_the_part_asked_about() -> None:
    for name in ("channel", "chat_id", "channel"):
        with pytest.raises(InvalidIdError, match=f"^{name} contains '..'"):
            validate_part(name, "a%252e%252e")  # double-encoded '..'
    assert validate_part("chat_id", "ok-1") == validate_part("chat_id", "ok-1") == "ok-1"


@HYPO
@given(sender=st.one_of(PART, LONG, st.sampled_from([n for n in NASTY if n and "\x00" not in n])))
@example(sender="a\\b")
@example(sender="zhangsan")
@example(sender="~sha256-" + "0" * 32)
def test_every_storable_sender_id_names_a_stable_profile_key_and_ordinary_ones_keep_theirs(sender: str) -> None:
    if not sender or "\x00" in sender:
        with pytest.raises(InvalidIdError):
            person_key("a", "wecom", sender)
        return
    key = person_key("a", "wecom", sender)
    assert key == person_key("a", "wecom", sender)  # stable
    assert (key.agent, key.channel) == ("a", "wecom")
    assert key_from_file_stem(key.file_stem) == key  # a real key: its file stem stays in its directory
    ordinary = _accepted("a", "wecom", sender) if not sender.startswith("~sha256-") else None
    assert key == (ordinary if ordinary is not None else session_key("a", "wecom", key.chat_id))
    assert ordinary is not None or (key.chat_id.startswith("~sha256-") and key.chat_id != sender)


def test_different_refused_sender_ids_name_different_profiles() -> None:
    odd = ["a\\b", "a\nb", "a\x01b", "../x", "a/b", " a", "a ", "x" * 129]
    assert len({person_key("a", "wecom", s) for s in odd}) == len(odd)
    for bad in ("", "a\x00b", "\ud800"):
        with pytest.raises(InvalidIdError):
            person_key("a", "wecom", bad)
