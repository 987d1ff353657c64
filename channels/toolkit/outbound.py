"""The cred_id rule of proactive messages: the credential named, or the only one; never a guess among several."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from agenthub.errors import ChannelSendError

Credential = TypeVar("Credential")


def choose_credential(
    channel: str, cred_id: str | None, candidates: Mapping[str, Credential], *, what: str = "credential"
) -> Credential:
    """The candidate `OutboundMessage.cred_id` names; without one, the only candidate. `ChannelSendError` when the
    named one is not among `candidates`, when there are several and none is named, or when there is none."""
    if cred_id is not None:
        found = candidates.get(cred_id)
        if found is None:
            raise ChannelSendError(f"no running {channel} {what} for cred_id={cred_id!r}")
        return found
    if len(candidates) > 1:
        raise ChannelSendError(f"several {channel} {what}s are configured: the message needs a cred_id")
    for only in candidates.values():
        return only
    raise ChannelSendError(f"no running {channel} {what}")
