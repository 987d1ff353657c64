"""What the channels' doctor checks share: a platform credential tried once, named by channel, credential id and the
host:port it went to, refused or unreachable said apart."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from agenthub.doctor import Check, fail, ok
from agenthub.errors import ChannelSendError, ConfigError


def host_port(url: str) -> str:
    """`host:port` of a URL, the scheme's port when none is written (what a check names as tried)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def config_failed(channel: str, error: ConfigError) -> list[Check]:
    """The one line for a `[channels.<channel>]` table that does not parse."""
    return [fail(channel, str(error), f"fix [channels.{channel}] in agenthub.toml")]


@dataclass(frozen=True)
class Credential:
    """One configured credential of a platform and the call that proves it (a token fetch)."""

    channel: str
    cred_id: str
    url: str
    """The base URL the call goes to."""
    action: str
    """The call as the platform names it (`gettoken`, `tenant token`)."""
    accepted: str
    """What an answer proves (`secret accepted`)."""
    hint: str
    """What to check when the platform refuses the credential."""
    network_hint: str = "check the network and proxy"


async def try_credential(
    credential: Credential,
    attempt: Callable[[], Awaitable[object]],
    unreachable: Callable[[ChannelSendError], bool],
) -> Check:
    """Run `attempt` once: ok when it answers; a `ChannelSendError` fails as unreachable (when `unreachable` says the
    request never got an answer) or as refused (the platform said no)."""
    name, where = f"{credential.channel} {credential.cred_id}", host_port(credential.url)
    try:
        await attempt()
    except ChannelSendError as e:
        if unreachable(e):
            return fail(name, f"{where} unreachable: {e}", credential.network_hint)
        return fail(name, f"{where} {credential.action} refused: {e}", credential.hint)
    return ok(name, f"{where} {credential.action}: {credential.accepted}")
