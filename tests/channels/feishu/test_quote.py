"""Feishu quoted replies: the message a reply quotes (`parent_id`) is fetched after the ack and put above it."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from channels.feishu.answers import KEPT_CHARS, RecentAnswers
from channels.feishu.format import markdown_card
from channels.feishu.quote import QUOTE_MAX_CHARS, render_quote, render_quote_text
from tests.support.fakes.feishu import message_event
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP, APP_ID, BOT, TOKEN, harness, post_event

PARENT = "om_parent_plan"
PLAN = {"text": "@_user_1 方案：\n1. 用 A\n2. 用 B，但要问 @_user_2"}
PLAN_MENTIONS = [{"key": "@_user_1", "id": BOT, "name": "Bot"}, {"key": "@_user_2", "id": "ou_bob", "name": "Bob"}]


def reply_event(text: str, parent_id: str) -> dict[str, object]:
    return message_event(text, token=TOKEN, app_id=APP_ID, parent_id=parent_id, root_id=parent_id)


async def test_a_reply_reaches_the_agent_with_the_quoted_message_fetched_after_the_ack(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        history = h.fake.history
        history.add_user_message(PARENT, PLAN, sender="ou_alice", mentions=PLAN_MENTIONS)
        history.hold()  # Feishu is slow to answer the fetch: the event must still be acked at once
        status, _ = await post_event(h, reply_event("what about point 2?", PARENT))
        assert status == 200 and gateway.received == []
        await h.fake.wait_until(lambda: len(history.gets) == 1)
        history.release()
        await gateway.wait_for(1)
    [msg] = gateway.received
    assert msg.content == "> 引用 ou_alice: 方案：\n> 1. 用 A\n> 2. 用 B，但要问 @Bob\n\nwhat about point 2?"
    assert msg.metadata["parent_id"] == PARENT
    [(fetched, query)] = history.gets
    assert fetched == PARENT and query["card_msg_content_type"] == "user_card_content"


async def test_a_reply_to_the_bots_own_answer_quotes_it_as_the_bot(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway, apps={"main": {**APP, "streaming_card": False}}) as h:
        await post_event(h, message_event("hi", token=TOKEN, app_id=APP_ID))
        await h.fake.wait_until(lambda: len(h.fake.replies()) == 1)
        answer_id = h.fake.replies()[0].message_id
        await post_event(h, reply_event("why?", answer_id))
        await gateway.wait_for(2)
    assert gateway.received[1].content == "> 引用 bot: echo: hi\n\nwhy?"


async def test_when_the_quote_cannot_be_fetched_the_message_is_answered_without_it(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    app = {**APP, "quote_timeout_s": 0.2}
    with capture_logs() as logs:
        async with harness(tmp_path, gateway, apps={"main": app}) as h:
            fake = h.fake
            fake.history.add_user_message(PARENT, PLAN, mentions=PLAN_MENTIONS)
            fake.fail_ops = {"message_get": 1}  # Feishu refuses the fetch (e.g. the bot left that chat)
            await post_event(h, reply_event("refused", PARENT))
            await post_event(h, reply_event("unknown", "om_never_seen"))  # 230001 invalid message_id
            await gateway.wait_for(2)
            fake.history.hold()  # and one that Feishu never answers in time
            await post_event(h, reply_event("slow", PARENT))
            await gateway.wait_for(3)
            fake.history.release()
            await fake.wait_until(lambda: fake.closed_cards() == 3)
    assert [m.content for m in gateway.received] == ["refused", "unknown", "slow"]  # one chat: arrival order
    assert sorted(c.content for c in fake.cards.values()) == ["echo: refused", "echo: slow", "echo: unknown"]
    unavailable = [e for e in logs if e["event"] == "feishu_quote_unavailable"]
    assert len(unavailable) == 3 and {e["log_level"] for e in unavailable} == {"warning"}
    assert any(e["error"] == "TimeoutError" for e in unavailable)
    assert any("230001" in e["error"] for e in unavailable)


async def test_a_slash_command_sent_as_a_reply_is_not_prefixed_or_fetched(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        h.fake.history.add_user_message(PARENT, PLAN)
        await post_event(h, reply_event("/new", PARENT))
        await gateway.wait_for(1)
    assert gateway.received[0].content == "/new" and h.fake.history.gets == []


def item(msg_type: str, content: str, sender: dict[str, str]) -> dict[str, object]:
    return {"message_id": "om_x", "msg_type": msg_type, "body": {"content": content}, "sender": sender}


USER = {"id": "ou_alice", "id_type": "open_id", "sender_type": "user"}


def test_quotes_are_capped_and_cover_posts_cards_and_other_types() -> None:
    import json

    long_text = json.dumps({"text": "长" * 2000})
    quote = render_quote(item("text", long_text, USER), bot_open_id=BOT, app_id=APP_ID)
    assert quote == f"> 引用 ou_alice: {'长' * QUOTE_MAX_CHARS}…"
    post = {
        "zh_cn": {"title": "周报", "content": [[{"tag": "text", "text": "进度 "}, {"tag": "md", "text": "**90%**"}]]}
    }
    quoted_post = render_quote(item("post", json.dumps(post), USER), bot_open_id=BOT, app_id=APP_ID)
    assert quoted_post == "> 引用 ou_alice: 周报\n> 进度 **90%**"
    bot = {"id": APP_ID, "id_type": "app_id", "sender_type": "app"}
    card = json.dumps(markdown_card("## 结论\n\n选 A"))
    assert (
        render_quote(item("interactive", card, bot), bot_open_id=BOT, app_id=APP_ID) == "> 引用 bot: ## 结论\n>\n> 选 A"
    )
    other_bot = {**bot, "id": "cli_other"}
    image = render_quote(item("image", '{"image_key":"img_1"}', other_bot), bot_open_id=BOT, app_id=APP_ID)
    assert image == "> 引用 app: [image]"
    assert render_quote(item("text", "not json", USER), bot_open_id=BOT, app_id=APP_ID) == ""


async def test_a_reply_to_the_bots_streamed_card_quotes_its_text_without_a_fetch(tmp_path: Path) -> None:
    """Feishu returns a CardKit card by reference, without the streamed text: the channel remembers its answers."""
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        await post_event(h, message_event("hi", token=TOKEN, app_id=APP_ID))
        await h.fake.wait_until(lambda: h.fake.closed_cards() == 1)
        [card_message] = h.fake.replies()
        assert card_message.msg_type == "interactive"
        await post_event(h, reply_event("why?", card_message.message_id))
        await gateway.wait_for(2)
    assert gateway.received[1].content == "> 引用 bot: echo: hi\n\nwhy?"
    assert h.fake.history.gets == []


async def test_a_slow_quote_delays_later_messages_of_its_chat_but_not_other_chats(tmp_path: Path) -> None:
    """Each event runs in its own task: the quote fetch of message 1 must not let message 2 of the same chat
    reach the gateway first, and must not hold up another chat."""
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        history = h.fake.history
        history.add_user_message(PARENT, PLAN, mentions=PLAN_MENTIONS)
        history.hold()
        await post_event(h, reply_event("first, about the plan", PARENT))
        await h.fake.wait_until(lambda: len(history.gets) == 1)
        await post_event(h, message_event("second", token=TOKEN, app_id=APP_ID))
        other = message_event("elsewhere", token=TOKEN, app_id=APP_ID, chat_id="oc_chat2", sender="ou_other")
        await post_event(h, other)
        await h.fake.wait_until(lambda: any(m.content == "elsewhere" for m in gateway.received))
        assert [m.content for m in gateway.received] == ["elsewhere"]  # "second" waits behind "first"
        history.release()
        await gateway.wait_for(3)
        await h.fake.wait_until(lambda: h.fake.closed_cards() == 3)
        assert len(h.channel._order) == 0  # no per-chat state is left once the chat is idle
    first, second = [m for m in gateway.received if m.chat_id == "ou_user1"]
    assert first.content.startswith("> 引用 ou_user1: 方案：") and first.content.endswith("first, about the plan")
    assert second.content == "second"


def test_recent_answers_keep_only_what_a_quote_can_show_and_forget_the_oldest() -> None:
    answers = RecentAnswers(limit=2)
    for n in range(3):
        answers.sent(f"om_card_{n}", f"om_user_{n}")
        answers.answered(f"om_user_{n}", f"answer {n} " + "长" * 10_000)
    assert answers.text_of("om_card_0") is None  # the oldest is forgotten
    kept = answers.text_of("om_card_2")
    assert kept is not None and kept.startswith("answer 2 ") and len(kept) <= KEPT_CHARS + 1
    assert len(render_quote_text(kept, "bot")) < 600  # still enough for a full-length quote
