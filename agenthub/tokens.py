"""Bearer tokens for the HTTP API: created once, stored only as SHA-256 hashes in `auth/tokens.json`."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenthub.errors import ConfigError
from agenthub.storage.atomic import atomic_write_text

TOKEN_PREFIX = "ahk_"
TOKENS_FILE = "tokens.json"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class StoredToken:
    name: str
    sha256: str
    created_at: int


class TokenStore:
    """Reads and writes `auth/tokens.json`; `verify` compares hashes in constant time against every entry."""

    def __init__(self, auth_dir: Path, extra_tokens: list[str] | None = None) -> None:
        self.path = auth_dir / TOKENS_FILE
        self._extra_hashes = [hash_token(t) for t in extra_tokens or [] if t]
        self._hashes: list[str] = []
        self._mtime: float | None = None

    def _entries(self) -> list[dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
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
        if not name.strip():
            raise ValueError("a token needs a name")
        if any(t.name == name for t in self.stored()):
            raise ValueError(f"a token named {name!r} already exists")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        entries = self._entries()
        entries.append({"name": name, "sha256": hash_token(token), "created_at": int(time.time())})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({"tokens": entries}, indent=2) + "\n")
        self.path.chmod(0o600)
        return token

    def _file_hashes(self) -> list[str]:
        """Hashes from the file, re-read only when it changed (tokens can be added while the daemon runs)."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            self._hashes, self._mtime = [], None
            return self._hashes
        if mtime != self._mtime:
            self._hashes = [t.sha256 for t in self.stored()]
            self._mtime = mtime
        return self._hashes

    def has_tokens(self) -> bool:
        return bool(self._extra_hashes or self._file_hashes())

    def verify(self, token: str) -> bool:
        """True when `token` matches a stored or configured token; every comparison runs, in constant time."""
        candidate = hash_token(token)
        matched = False
        for known in (*self._extra_hashes, *self._file_hashes()):
            matched |= hmac.compare_digest(candidate, known)
        return matched
