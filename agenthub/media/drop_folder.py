"""Taking in a message's attachments: images prepared and saved by content, files saved under a safe name."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agenthub import i18n
from agenthub.config import MediaSettings
from agenthub.media.images import ImageRejectedError, PreparedImage, prepare_image
from agenthub.media.names import inbox_dir, numbered, relative_to_workspace, safe_file_name
from agenthub.media.refs import image_ref, image_ref_source
from agenthub.messages import Attachment
from agenthub.session_keys import SessionKey

log = structlog.get_logger(__name__)

HASH_CHARS = 32
"""Images are saved as `<first 32 hex digits of the sha256 of what was sent>.<ext>`: a re-sent picture is one file."""
MAX_SAME_NAME = 1000
PARALLEL_IMAGES = 2
"""Pictures decoded at the same time (each can take ~150 MB and seconds of CPU): the others wait their turn."""
MB = 1024 * 1024
_MIME = re.compile(r"[\w.+-]{1,64}/[\w.+-]{1,64}")
SAVED_AT = "It is saved in your workspace at "
READ_IT = "; read it with read_file"
_SAVED_FILE = re.compile(re.escape(SAVED_AT) + r"(.+?)(?:" + re.escape(READ_IT) + r")?\.\]\Z")


@dataclass
class Intake:
    """What one message's attachments became: blocks for the stored user message, and texts for the user about
    the ones refused (in the chat's locale)."""

    blocks: list[dict[str, Any]] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    accepted: int = 0
    """Attachments that reached the blocks as an image or a file (not as a note that one was refused)."""


class MediaInbox:
    """Saves attachments to `workspace/<agent>/inbox/<chat>/` (design §14); file I/O and image work off the loop."""

    def __init__(self, workspace_dir: Path, settings: MediaSettings) -> None:
        self.workspace_dir = workspace_dir
        self.settings = settings
        self._decoding = asyncio.Semaphore(PARALLEL_IMAGES)

    async def take_in(
        self, key: SessionKey, attachments: tuple[Attachment, ...], locale: str, *, can_read_files: bool
    ) -> Intake:
        intake = Intake()
        for attachment in attachments:
            try:
                await self._take_one(key, attachment, locale, can_read_files, intake)
            except OSError as e:  # a full disk, a read-only or odd workspace: the user hears it, the turn goes on
                log.warning("media_save_failed", kind=attachment.kind, error=str(e))
                what = i18n.text(f"media.what.{attachment.kind}", locale)
                intake.refusals.append(i18n.text("media.save_failed", locale, what=what))
                intake.blocks.append(_note(f"[The user sent a {attachment.kind} that could not be saved.]"))
        return intake

    async def _take_one(
        self, key: SessionKey, attachment: Attachment, locale: str, can_read_files: bool, intake: Intake
    ) -> None:
        workspace = self.workspace_dir / key.agent
        refusal = self._refusal_for_size(attachment, locale)
        if refusal is not None:
            intake.refusals.append(refusal)
            intake.blocks.append(_note(f"[The user sent a {attachment.kind} that was too large to take in.]"))
        elif attachment.kind == "image":
            await self._take_image(workspace, key, attachment, locale, intake)
        else:
            path = await asyncio.to_thread(_save_file, inbox_dir(workspace, key), attachment)
            intake.blocks.append(_file_line(attachment, relative_to_workspace(key, path.name), can_read_files))
            intake.accepted += 1
            log.info("media_file_saved", name=path.name, size=len(attachment.data))

    def _refusal_for_size(self, attachment: Attachment, locale: str) -> str | None:
        limit = self.settings.max_download_bytes
        if len(attachment.data) <= limit:
            return None
        log.warning("media_refused_too_large", kind=attachment.kind, size=len(attachment.data), limit=limit)
        what = i18n.text(f"media.what.{attachment.kind}", locale)
        return i18n.text("media.too_large", locale, what=what, size_mb=_mb(len(attachment.data)), limit_mb=_mb(limit))

    async def _take_image(
        self, workspace: Path, key: SessionKey, attachment: Attachment, locale: str, intake: Intake
    ) -> None:
        limits = self.settings
        try:
            async with self._decoding:
                prepared = await asyncio.to_thread(
                    prepare_image,
                    attachment.data,
                    max_bytes=limits.max_image_bytes,
                    max_edge_px=limits.max_image_edge_px,
                )
        except ImageRejectedError as e:
            log.warning("media_image_refused", reason=e.reason, size=len(attachment.data), mime=attachment.mime_type)
            if e.reason == "unreadable":
                intake.refusals.append(i18n.text("media.image_unreadable", locale))
            else:
                intake.refusals.append(i18n.text("media.image_too_big", locale, limit_mb=_mb(limits.max_image_bytes)))
            intake.blocks.append(_note("[The user sent a picture that could not be read.]"))
            return
        digest = hashlib.sha256(attachment.data).hexdigest()[:HASH_CHARS]
        name = f"{digest}.{prepared.extension}"
        await asyncio.to_thread(_save_image, inbox_dir(workspace, key), name, prepared)
        intake.blocks.append(image_ref(relative_to_workspace(key, name), prepared.media_type))
        intake.accepted += 1


def _note(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _file_line(attachment: Attachment, path: str, can_read_files: bool) -> dict[str, Any]:
    """The line that tells the model a file arrived and where it is."""
    how = READ_IT if can_read_files else ""
    mime = attachment.mime_type if _MIME.fullmatch(attachment.mime_type) else "type unknown"
    name = safe_file_name(attachment.name)  # the platform's name, without line breaks or other control characters
    return _note(f'[The user sent a file "{name}" ({_size(len(attachment.data))}, {mime}). {SAVED_AT}{path}{how}.]')


def stored_media_paths(content: Any) -> set[str]:
    """The workspace paths a stored user message's content refers to: its image references and the paths its
    file lines told the model (the inverse of the blocks `MediaInbox.take_in` makes)."""
    paths: set[str] = set()
    for block in content if isinstance(content, list) else ():
        ref = image_ref_source(block)
        if ref is not None:
            paths.add(ref[0])
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            found = _SAVED_FILE.search(block["text"])
            if found:
                paths.add(found.group(1))
    return paths


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < MB:
        return f"{n / 1024:.1f} KB"
    return f"{n / MB:.1f} MB"


def _mb(n: int) -> str:
    return f"{n / MB:.0f}" if n >= 10 * MB else f"{n / MB:.1f}".rstrip("0").rstrip(".")


def _prepare_dir(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if directory.is_symlink() or directory.parent.is_symlink():
        raise OSError("refused a linked inbox directory")
    return directory


def _save_image(directory: Path, name: str, prepared: PreparedImage) -> None:
    directory = _prepare_dir(directory)
    if not (directory / name).exists():  # named by content: the same picture is stored once
        _write_new(directory, name, prepared.data)


def _save_file(directory: Path, attachment: Attachment) -> Path:
    """Save under the platform's name made safe; the same name with other content gets `-2`, `-3`, …; the same
    content under the same name is stored once."""
    directory = _prepare_dir(directory)
    base = safe_file_name(attachment.name)
    for n in range(1, MAX_SAME_NAME + 1):
        name = base if n == 1 else numbered(base, n)
        target = directory / name
        if _holds(target, attachment.data):
            return target
        if not target.exists() and not target.is_symlink() and _write_new(directory, name, attachment.data):
            return target
    raise OSError("too many files of the same name in the inbox")


def _holds(path: Path, data: bytes) -> bool:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError:
        return False


def _write_new(directory: Path, name: str, data: bytes) -> bool:
    """Write `data` as `directory/name` whole (a temp file, then a link that fails if the name was taken
    meanwhile); False when another writer got the name first."""
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".incoming-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temp, directory / name)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
