"""Bearer tokens for the HTTP API: created once, stored only as SHA-256 hashes in `auth/tokens.json`."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenthub import jsonsafe
from agenthub.errors import ConfigError
from agenthub.session_keys import validate_part
from agenthub.storage.atomic import atomic_write_text

TOKEN_PREFIX = "ahk_"
TOKENS_FILE = "tokens.json"
CONFIG_TOKEN_NAME = "config"
"""Tokens from the `http.tokens` setting go by `config-1`, `config-2`, … (in logs and as the HTTP sender);
names of that form are reserved, so no stored token can share a caller's identity with them."""
RESERVED_NAME = re.compile(rf"{CONFIG_TOKEN_NAME}(-\d+)?", re.IGNORECASE)
MAX_NAME_BYTES = 64
"""A token's name is also the HTTP sender id, which per-user memory uses in a file name."""


class FileTokenCheck:
    """`TokenCheck` over a `TokenStore` (a stat, and a read only when the file changed)."""

    def __init__(self, store: TokenStore) -> None:
        self.store = store

    async def identify(self, token: str) -> str | None:
        return self.store.identify(token)

    async def has_tokens(self) -> bool:
        return self.store.has_tokens()


class FileTokens(FileTokenCheck):
    """The `Tokens` port over `auth/tokens.json` (a small file read and written in place, as `TokenStore` does)."""

    async def stored(self) -> list[StoredToken]:
        return self.store.stored()

    async def create(self, name: str) -> str:
        return self.store.create(name)

    async def revoke(self, name: str) -> bool:
        return self.store.revoke(name)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_new_name(name: str) -> None:
    """ValueError (InvalidIdError) unless `name` may name a new token."""
    validate_part("token name", name)  # it is also the HTTP sender id, which per-user memory uses in a path
    if RESERVED_NAME.fullmatch(name):
        raise ValueError(f"token name {name!r} is reserved for tokens from the http.tokens setting")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ValueError(f"token name is longer than {MAX_NAME_BYTES} bytes (UTF-8)")


@dataclass(frozen=True)
class StoredToken:
    name: str
    sha256: str
    created_at: int


class TokenStore:
    """Reads and writes `auth/tokens.json`; `identify` compares hashes in constant time against every entry."""

    def __init__(self, auth_dir: Path, extra_tokens: list[str] | None = None) -> None:
        self.path = auth_dir / TOKENS_FILE
        configured = [t for t in extra_tokens or [] if t]
        self._extra = [(f"{CONFIG_TOKEN_NAME}-{n}", hash_token(t)) for n, t in enumerate(configured, start=1)]
        self._named: list[tuple[str, str]] = []
        self._version: tuple[int, int] | None = None

    def _entries(self) -> list[dict[str, Any]]:
        try:
            data = jsonsafe.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (ValueError, UnicodeDecodeError):
            raise ConfigError(f"{self.path}: not valid JSON") from None
        tokens = data.get("tokens") if isinstance(data, dict) else None
        return [t for t in tokens if isinstance(t, dict)] if isinstance(tokens, list) else []

    def stored(self) -> list[StoredToken]:
        return [
            StoredToken(str(t.get("name", "")), str(t.get("sha256", "")), int(t.get("created_at", 0)))
            for t in self._entries()
        ]

    def create(self, name: str) -> str:
        """Make a new token, store its hash under `name`, and return the token (shown once, never stored)."""
        check_new_name(name)
        if any(t.name == name for t in self.stored()):
            raise ValueError(f"a token named {name!r} already exists")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        entries = self._entries()
        entries.append({"name": name, "sha256": hash_token(token), "created_at": int(time.time())})
        self._write(entries)
        return token

    def revoke(self, name: str) -> bool:
        """Delete the token called `name`; False when there is none. A running daemon refuses it at once."""
        entries = self._entries()
        kept = [t for t in entries if t.get("name") != name]
        if len(kept) == len(entries):
            return False
        self._write(kept)
        return True

    def _write(self, entries: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({"tokens": entries}, indent=2) + "\n")
        self.path.chmod(0o600)

    def _file_tokens(self) -> list[tuple[str, str]]:
        """(name, hash) pairs from the file, re-read only when it changed (tokens come and go while the daemon
        runs); an atomic replace gives the file a new inode, so a change within one mtime tick is seen too."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._named, self._version = [], None
            return self._named
        version = (stat.st_mtime_ns, stat.st_ino)
        if version != self._version:
            self._named = [(t.name, t.sha256) for t in self.stored()]
            self._version = version
        return self._named

    def has_tokens(self) -> bool:
        return bool(self._extra or self._file_tokens())

    def identify(self, token: str) -> str | None:
        """The name of the token `token` matches (`config` for one from `http.tokens`), or None. Every stored
        hash is compared, in constant time, whichever matches."""
        candidate = hash_token(token)
        found: str | None = None
        for name, known in (*self._extra, *self._file_tokens()):
            if hmac.compare_digest(candidate, known) and found is None:
                found = name
        return found

    def verify(self, token: str) -> bool:
        """True when `token` matches a stored or configured token."""
        return self.identify(token) is not None
