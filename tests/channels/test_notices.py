"""The notice lines platform channels put above a reply."""

from __future__ import annotations

from channels.notices import NOTICE_MARK, with_notices


def test_notices_go_above_the_reply_once_each() -> None:
    shown = with_notices(
        "答案", ["Model 'x' is not available; using 'y'.", "  ", "Model 'x' is not available; using 'y'."]
    )
    assert shown == f"{NOTICE_MARK} Model 'x' is not available; using 'y'.\n\n答案"


def test_no_notices_leave_the_reply_alone_and_an_empty_reply_keeps_the_notices() -> None:
    assert with_notices("答案", []) == "答案"
    assert with_notices("", ["compacted"]) == f"{NOTICE_MARK} compacted"
