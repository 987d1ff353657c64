"""Which MEMORY.md and user profile a chat reads and feeds, by `MemoryName` (the memory scope: `auto`, `agent`,
`chat`; the profile: `auto`, `shared`, `per_user`, kept per person and visibility on multi-user channels), read
from the injected `MemoryStore`, and the one writer every change to them goes through."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agenthub.agent.definition import AgentDefinition
from agenthub.aio import run_to_end
from agenthub.session_keys import SessionKey, person_key
from agenthub.storage.memory_files import FileMemoryStore, MemoryName
from agenthub.storage.ports import MemoryStore

MULTI_USER_CHANNELS = frozenset({"wecom", "feishu"})
"""Channels where several people talk to the bot (groups, many employees): `auto` keeps their memory apart."""
Visibility = Literal["private", "group"]
"""Which of a person's profiles a chat shows and feeds: the one built from private chats, or from groups."""


@dataclass(frozen=True)
class MemoryScope:
    """What one chat reads and feeds: the agent-wide MEMORY.md or the chat's own, the shared USER.md or the
    sender's own profile of this chat's visibility."""

    memory: Literal["agent", "chat"]
    profile: Literal["shared", "per_user"]
    visibility: Visibility


def chat_visibility(channel: str, chat_type: object) -> Visibility:
    """A chat on a single-user channel (CLI, HTTP console) is private; on WeCom and Feishu only a chat marked
    `chat_type = "private"` is, anything else (a group, or no mark: the safe side) is a group."""
    if channel not in MULTI_USER_CHANNELS:
        return "private"
    return "private" if chat_type == "private" else "group"


def memory_scope(agent: AgentDefinition, channel: str, chat_type: object = None) -> MemoryScope:
    """The scope of a chat of `agent` on `channel`: explicit `scope` / `user_profile` win; `auto` (the default)
    means chat memory and a per-sender profile on multi-user channels, the agent's and the shared one elsewhere."""
    options = agent.config.memory
    multi_user = channel in MULTI_USER_CHANNELS
    memory = options.scope if options.scope != "auto" else ("chat" if multi_user else "agent")
    profile = options.user_profile if options.user_profile != "auto" else ("per_user" if multi_user else "shared")
    return MemoryScope(memory, profile, chat_visibility(channel, chat_type))


class MemoryWriter:
    """Every change to a memory file (the write_memory tool, L3, the memory flush before a compaction, a forget)
    goes through here: `update` is the store's one read-modify-write step (`MemoryStore.update`: atomic against
    every other writer, on PostgreSQL those of other instances too), so no writer silently drops another's change.
    Readers need no lock: each write is an atomic replace. Each change runs to its end even if its caller is
    cancelled meanwhile (the caller still sees its cancellation), so a file is never left half-changed."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def update(self, name: MemoryName, change: Callable[[str], str], *, keep_backup: bool = False) -> str:
        """`change(text)` written ("" when the file is missing); returns the new text. An exception from
        `change` leaves the file as it was. With `keep_backup` the replaced text is kept as `<file>.bak`."""
        return await run_to_end(self.store.update(name, change, keep_backup=keep_backup))

    async def delete(self, name: MemoryName) -> bool:
        """The file and its backup; True if the file existed."""

        async def both() -> bool:
            gone = await self.store.delete(name)
            await self.store.delete(name.backup_name())
            return gone

        return await run_to_end(both())


class MemoryFiles:
    """Names the memory files of a chat through `memory_scope` and reads them from `store` (`Stores.memory`: the
    files of design §4, or PostgreSQL); `writer` makes every change to them.

    A person is a sender id on one channel. Their profiles: `auth/users/<agent>_<channel>_<sender>.md` (private:
    shown in and fed by their private chats, and the only one on single-user channels) and, per group chat,
    `auth/users/group/<chat's session stem>/<agent>_<channel>_<sender>.md` (shown in and fed by what they said in
    that group only: what one group heard never reaches another through a member's profile). Profiles of the older
    layout (`<agent>_user_<sender>.md`, no channel, one group profile for all groups) are not read any more."""

    def __init__(self, data_dir: Path, auth_dir: Path, store: MemoryStore | None = None) -> None:
        self.data_dir, self.auth_dir = data_dir, auth_dir
        self.store: MemoryStore = store if store is not None else FileMemoryStore(data_dir, auth_dir)
        self.writer = MemoryWriter(self.store)

    def scope_for(self, agent: AgentDefinition, channel: str, chat_type: object = None) -> MemoryScope:
        """The one scope rule (`memory_scope`): every reader and writer of memory resolves a chat through it."""
        return memory_scope(agent, channel, chat_type)

    def memory_name(self, agent: AgentDefinition, key: SessionKey | None = None) -> MemoryName:
        """The MEMORY.md a chat reads and writes (the agent-wide one when `key` is None)."""
        if key is not None and self.scope_for(agent, key.channel).memory == "chat":
            return MemoryName.chat_memory(key)
        return MemoryName.agent_memory(agent.name)

    def l3_state_name(self, agent: AgentDefinition) -> MemoryName:
        """Where L3 keeps `agent`'s watermarks (`l3_material.L3State`), beside its MEMORY.md."""
        return MemoryName.l3_state(agent.name)

    @property
    def shared_profile(self) -> MemoryName:
        return MemoryName.shared_profile()

    def profile_name(
        self, agent: AgentDefinition, key: SessionKey, sender_id: str, chat_type: object
    ) -> MemoryName | None:
        """The profile a chat shows for its current sender: the shared USER.md, or the sender's own of this chat's
        visibility; None when the profile is per person and the message has no sender."""
        scope = self.scope_for(agent, key.channel, chat_type)
        if scope.profile == "shared":
            return self.shared_profile
        return self.person_profile(agent, key, sender_id, scope.visibility) if sender_id else None

    def person_profile(
        self, agent: AgentDefinition, key: SessionKey, sender_id: str, visibility: Visibility
    ) -> MemoryName:
        """The profile of `sender_id` on `key`'s channel with `agent` for the chat `key` (of `visibility`)."""
        return MemoryName.person_profile(agent.name, key, sender_id, visibility)

    async def person_profiles(self, agent: AgentDefinition, channel: str, sender_id: str) -> list[MemoryName]:
        """Every profile of one person with `agent` (for "forget me"): the private one, one per group chat, and
        those of the older layout under their sender id (unread, and not tied to a channel)."""
        own_chat = person_key(agent.name, channel, sender_id)
        private = MemoryName.person_profile(agent.name, own_chat, sender_id, "private")
        groups = await self.store.group_profiles(private.person)
        return [private, *groups, *MemoryName.legacy_profiles(agent.name, sender_id)]

    async def read(self, name: MemoryName) -> str:
        """The text, "" when the file does not exist."""
        return await self.store.read(name)

    async def read_many(self, names: Sequence[MemoryName], *, fresh_since: float | None = None) -> list[str]:
        """`MemoryStore.read_many`: as new as every write completed before `fresh_since` (None: now)."""
        return await self.store.read_many(names, fresh_since=fresh_since)

    def label(self, name: MemoryName) -> str:
        """How logs and the L3 state name the file (`MemoryStore.label`)."""
        return self.store.label(name)

    def file_of(self, name: MemoryName) -> Path | None:
        """The file holding `name` when the store keeps files (the search index reads it there); None on a store
        without files (PostgreSQL)."""
        return self.store.path_of(name) if isinstance(self.store, FileMemoryStore) else None
