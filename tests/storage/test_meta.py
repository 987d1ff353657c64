"""SessionMeta's JSON form: every field, `last_usage` copied and left out when None, read back as it was."""

from __future__ import annotations

from dataclasses import fields

from agenthub.storage.meta import SessionMeta


def test_the_json_form_holds_every_field_and_reads_back_as_the_same_meta() -> None:
    usage = {"input_tokens": 12, "output_tokens": 3}
    meta = SessionMeta("c1", title="t", created_at=1, updated_at=2, pinned=True, last_usage=usage)
    data = meta.to_json()
    assert list(data) == [f.name for f in fields(SessionMeta)]
    assert SessionMeta.from_json(data) == meta
    data["last_usage"]["input_tokens"] = 99  # a copy: the meta's own usage is not changed through it
    assert meta.last_usage == {"input_tokens": 12, "output_tokens": 3}


def test_a_meta_without_usage_leaves_it_out_of_the_json_form() -> None:
    data = SessionMeta("c1").to_json()
    assert "last_usage" not in data
    assert SessionMeta.from_json(data) == SessionMeta("c1")
