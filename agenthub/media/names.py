"""The per-chat folders of an agent's workspace (inbound media in `inbox/<chat>/`, moved tool results in
`large_tool_results/<chat>/`), the rule that keeps one chat out of another's, and file names made safe."""

from __future__ import annotations

import shutil
import unicodedata
from pathlib import Path, PurePosixPath

from agenthub.errors import PathRefusedError
from agenthub.session_keys import SessionKey

INBOX = "inbox"
LARGE_RESULTS = "large_tool_results"
PER_CHAT_FOLDERS = (INBOX, LARGE_RESULTS)
"""Workspace folders with one sub-folder per chat: a chat's tools reach only its own."""
MAX_NAME_BYTES = 120
"""File names are cut to this many UTF-8 bytes (the extension kept), well under every file system's 255."""
FALLBACK_NAME = "file"
_RESERVED = set('<>:"|?*')


def chat_dir_name(key: SessionKey) -> str:
    """The chat's directory under the inbox: the session file stem without the agent part (`wecom_zhangsan`),
    one-to-one like the stem itself."""
    agent_prefix = SessionKey(key.agent, "c", "c").file_stem[: -len("_c_c")]
    return key.file_stem[len(agent_prefix) + 1 :]


def inbox_dir(workspace: Path, key: SessionKey) -> Path:
    """`workspace/<agent>/inbox/<chat>/` for `workspace` = `workspace/<agent>`."""
    return workspace / INBOX / chat_dir_name(key)


def relative_to_workspace(key: SessionKey, name: str) -> str:
    """The path the model uses with `read_file` (relative to its workspace)."""
    return str(PurePosixPath(INBOX, chat_dir_name(key), name))


def safe_file_name(raw: str) -> str:
    """A plain file name from a platform's name: the last path part only, no control or reserved characters,
    no leading dots or spaces, at most `MAX_NAME_BYTES` bytes with the extension kept; `file` when nothing is
    left."""
    name = unicodedata.normalize("NFC", raw).replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(
        "_" if ch in _RESERVED else ch for ch in name if not unicodedata.category(ch).startswith("C")
    ).strip()
    name = name.lstrip(". ").rstrip(". ")
    return _cap(name) or FALLBACK_NAME


def _cap(name: str) -> str:
    if len(name.encode("utf-8")) <= MAX_NAME_BYTES:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or len(ext.encode("utf-8")) > 16:
        stem, ext = name, ""
    room = MAX_NAME_BYTES - (len(ext.encode("utf-8")) + 1 if ext else 0)
    cut = stem.encode("utf-8")[:room].decode("utf-8", errors="ignore").rstrip(". ")
    return f"{cut}.{ext}" if ext else cut


def numbered(name: str, n: int) -> str:
    """`report-2.txt` for (`report.txt`, 2): the name of the n-th different file sent under one name."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        return f"{name}-{n}"
    return f"{stem}-{n}.{ext}"


def chat_folders(workspace: Path, key: SessionKey) -> tuple[Path, ...]:
    """This chat's own folder under each per-chat workspace folder (what goes with the chat)."""
    return tuple(workspace / folder / chat_dir_name(key) for folder in PER_CHAT_FOLDERS)


def remove_chat_folder(directory: Path) -> None:
    """Delete one chat's folder (blocking: run it in a thread); a planted link is refused, never followed."""
    if directory.is_symlink():
        raise PathRefusedError(f"refused a linked {directory.parent.name} directory")
    if directory.is_dir():
        shutil.rmtree(directory)


def another_chats_folder(path: Path, workspace: Path, key: SessionKey) -> str | None:
    """The per-chat folder (`inbox`, `large_tool_results`) when the resolved `path` lies in it but outside this
    chat's own sub-folder (the folder itself included: its listing names every chat), else None: one chat's files
    never reach another chat's tools."""
    for folder in PER_CHAT_FOLDERS:
        root = (workspace / folder).resolve()
        if path != root and not path.is_relative_to(root):
            continue
        own = (workspace / folder / chat_dir_name(key)).resolve()
        return None if path == own or path.is_relative_to(own) else folder
    return None
