"""L3 and memory-flush rewrites never lose MEMORY.md / USER.md: cut answers and drastic shrinks are refused,
and the replaced version is kept as `<file>.bak`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.memory.wiring import L3_TIMER
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text
from tests.support.memory import backup_of, chat_memory_file, is_l3_request, is_summary_request, msg, seed, system_text

OLD_MEMORY = "\n".join(f"- durable fact {i:03d} about the project" for i in range(60)) + "\n"  # > 1000 chars


def _l3(memory: str, profile: str = "# User\n- prefers tea", **kw: Any) -> Callable[[dict[str, Any]], Any]:
    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        if not is_l3_request(body):
            return None
        return reply_text(profile if "USER.md" in system_text(body).split("\n")[0] else memory, **kw)

    return respond


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


async def test_an_l3_answer_cut_at_max_tokens_keeps_the_old_files(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    fake_llm.responder = _l3("# Memory\n- half of the new fi", stop_reason="max_tokens")
    async with build_gateway(settings) as gw:
        memory_file = gw.history.layout("default").memory_file
        _write(memory_file, "old memory\n")
        await seed(gw, gw.resolve_key(msg("x"))[1], 2)
        with capture_logs() as logs:
            await gw.timers[L3_TIMER].tick_now()
        assert memory_file.read_text(encoding="utf-8") == "old memory\n"
        assert not (settings.auth_dir / "USER.md").exists()  # a failed run writes nothing at all
        failed = [e for e in logs if e["event"] == "l3_run_failed"]
        assert failed and "stop_reason=max_tokens" in str(failed[0]["errors"])


async def test_the_replaced_version_is_kept_as_bak_one_generation(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    async with build_gateway(settings) as gw:
        memory_file = gw.history.layout("default").memory_file
        _write(memory_file, "old memory\n")
        _write(settings.auth_dir / "USER.md", "old profile\n")
        key = gw.resolve_key(msg("x"))[1]
        fake_llm.responder = _l3("# Memory v2", "# User v2")
        await seed(gw, key, 2)
        await gw.timers[L3_TIMER].tick_now()
        assert memory_file.read_text(encoding="utf-8") == "# Memory v2\n"
        assert backup_of(memory_file).read_text(encoding="utf-8") == "old memory\n"
        assert (settings.auth_dir / "USER.md.bak").read_text(encoding="utf-8") == "old profile\n"

        fake_llm.responder = _l3("# Memory v3", "# User v3")
        await seed(gw, key, 2, start=10)
        await gw.timers[L3_TIMER].tick_now()
        assert memory_file.read_text(encoding="utf-8") == "# Memory v3\n"
        assert backup_of(memory_file).read_text(encoding="utf-8") == "# Memory v2\n"


async def test_a_rewrite_shrinking_a_long_file_below_a_quarter_is_refused(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    fake_llm.responder = _l3("# Memory\n- one fact left")
    async with build_gateway(settings) as gw:
        memory_file = gw.history.layout("default").memory_file
        _write(memory_file, OLD_MEMORY)
        _write(settings.auth_dir / "USER.md", "short old profile\n")  # under 1000 characters: may shrink
        await seed(gw, gw.resolve_key(msg("x"))[1], 2)
        with capture_logs() as logs:
            await gw.timers[L3_TIMER].tick_now()
        assert memory_file.read_text(encoding="utf-8") == OLD_MEMORY
        assert not backup_of(memory_file).exists()
        refused = [e for e in logs if e["event"] == "memory_rewrite_refused"]
        assert len(refused) == 1 and refused[0]["old_chars"] == len(OLD_MEMORY) and refused[0]["purpose"] == "l3"
        assert (settings.auth_dir / "USER.md").read_text(encoding="utf-8") == "# User\n- prefers tea\n"


async def test_a_rewrite_keeping_a_quarter_is_accepted(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    kept = OLD_MEMORY[: len(OLD_MEMORY) // 3]
    fake_llm.responder = _l3(kept)
    async with build_gateway(settings) as gw:
        memory_file = gw.history.layout("default").memory_file
        _write(memory_file, OLD_MEMORY)
        await seed(gw, gw.resolve_key(msg("x"))[1], 2)
        await gw.timers[L3_TIMER].tick_now()
        assert memory_file.read_text(encoding="utf-8") == kept.strip() + "\n"
        assert backup_of(memory_file).read_text(encoding="utf-8") == OLD_MEMORY


async def test_a_memory_flush_cut_at_max_tokens_leaves_memory_and_still_compacts(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    def responder(body: dict[str, Any]) -> ScriptedReply | None:
        if is_summary_request(body):
            return reply_text("用户在做项目 X。")
        if "MEMORY.md" in system_text(body):
            return reply_text("- half a fa", stop_reason="max_tokens")
        return None

    fake_llm.responder = responder
    async with build_gateway(settings_factory()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        memory_file = chat_memory_file(gw, gw.agents.get("default"), key)
        _write(memory_file, "old memory\n")
        await seed(gw, key, 25)
        with capture_logs() as logs:
            await (await gw.submit(msg("/compact"))).result()
        assert any(e["event"] == "memory_flush_failed" for e in logs)
        assert memory_file.read_text(encoding="utf-8") == "old memory\n"
        assert (await gw.history.load(key))[0]["content"].startswith("[历史摘要]")


async def test_material_whose_rewrite_was_refused_is_offered_again_next_run(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    fake_llm.responder = _l3("# Memory\n- one fact left")  # refused: under a quarter of OLD_MEMORY
    async with build_gateway(settings) as gw:
        memory_file = gw.history.layout("default").memory_file
        _write(memory_file, OLD_MEMORY)
        await seed(gw, gw.resolve_key(msg("x"))[1], 2)
        await gw.timers[L3_TIMER].tick_now()
        first = len([r for r in fake_llm.message_requests() if is_l3_request(r.body or {})])
        fake_llm.responder = _l3(OLD_MEMORY + "- a new fact from the chat\n")
        with capture_logs() as logs:
            await gw.timers[L3_TIMER].tick_now()  # nothing new was said, yet the same material comes back
        assert len([r for r in fake_llm.message_requests() if is_l3_request(r.body or {})]) > first
        assert not any(e["event"] == "l3_nothing_new" for e in logs)
        assert memory_file.read_text(encoding="utf-8").endswith("- a new fact from the chat\n")
