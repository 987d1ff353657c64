"""choose_credential: the one rule for which credential a proactive message goes out on."""

from __future__ import annotations

import pytest

from agenthub.errors import ChannelSendError
from channels.toolkit.outbound import choose_credential


def test_a_named_credential_is_used_and_an_unknown_one_refused() -> None:
    candidates = {"hr": "HR", "ops": "OPS"}
    assert choose_credential("demo", "ops", candidates) == "OPS"
    with pytest.raises(ChannelSendError, match="no running demo bot for cred_id='nope'"):
        choose_credential("demo", "nope", candidates, what="bot")


def test_without_a_cred_id_only_a_single_credential_may_be_guessed() -> None:
    assert choose_credential("demo", None, {"hr": "HR"}) == "HR"
    with pytest.raises(ChannelSendError, match="needs a cred_id"):
        choose_credential("demo", None, {"hr": "HR", "ops": "OPS"})
    with pytest.raises(ChannelSendError, match="no running demo credential"):
        choose_credential("demo", None, {})
