"""SIGHUP's agent reload: new and edited agents appear, a broken edit keeps the running definition."""

from __future__ import annotations

import shutil

from structlog.testing import capture_logs

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.hosting.daemon import Daemon
from tests.support.agents import write_agent


async def test_a_broken_edit_keeps_the_previous_definition_and_a_deleted_agent_goes(settings: Settings) -> None:
    reviewer = write_agent(settings.agents_dir, "reviewer", {"description": "reviews code"})
    daemon = Daemon(settings)
    async with build_gateway(settings) as gateway:
        assert gateway.agents.get("reviewer").config.description == "reviews code"

        write_agent(settings.agents_dir, "reviewer", {"description": "reviews code carefully"})
        write_agent(settings.agents_dir, "writer")
        daemon.reload_agents(gateway)
        assert gateway.agents.get("reviewer").config.description == "reviews code carefully"
        assert "writer" in gateway.agents

        (reviewer / "agent.json").write_text("{ not json", encoding="utf-8")  # an operator's typo
        with capture_logs() as logs:
            daemon.reload_agents(gateway)
        assert gateway.agents.get("reviewer").config.description == "reviews code carefully"
        assert "reviewer" in gateway.agents.errors  # reported, still answering with what it had
        assert [e["agent"] for e in logs if e["event"] == "agent_reload_kept_previous"] == ["reviewer"]

        shutil.rmtree(reviewer)
        daemon.reload_agents(gateway)
        assert "reviewer" not in gateway.agents and "writer" in gateway.agents
