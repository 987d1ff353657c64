"""The checks of what the daemon talks to besides the model: PostgreSQL (reachable, schema version), the agents'
MCP servers (each started once), and each configured channel's credentials (through the channel's own check)."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agenthub.agent.definition import load_agents
from agenthub.agent.mcp_support import RestartBackoff
from agenthub.config import Settings
from agenthub.doctor import Check, fail, ok, warn
from agenthub.errors import ConfigError

MCP_START_S = 20.0
PG_HINT = "check [store] dsn (AGENTHUB_STORE__DSN): host, port, user, and that the server runs"
DOCTOR_HOOKS: dict[str, str] = {
    "wecom": "channels.wecom.doctor:checks",
    "feishu": "channels.feishu.doctor:checks",
}
"""A channel's credential check, `async checks(raw_config) -> list[Check]`, as an import string (the core never
imports a channel's module by name)."""

ChannelChecks = Callable[[Mapping[str, Any]], Awaitable[list[Check]]]


async def postgres_check(settings: Settings) -> list[Check]:
    """With `[store] backend = "postgres"`: connect once and read the schema version (nothing is changed)."""
    store = settings.store
    if store.backend != "postgres" or store.dsn is None:
        return [ok("store", f"files under {settings.data_dir.resolve()}")]
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from agenthub.storage.postgres.schema import SCHEMA_VERSION

    dsn = store.dsn.get_secret_value()
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return [fail("postgres", "[store] dsn is not a valid PostgreSQL connection string", PG_HINT)]
    where = f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}/{info.get('dbname') or ''}"
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            cursor = await conn.execute("SELECT to_regclass('schema_version') IS NOT NULL")
            row = await cursor.fetchone()
            version = 0
            if row is not None and row[0]:
                cursor = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
                found = await cursor.fetchone()
                version = int(found[0]) if found is not None else 0
    except (psycopg.Error, OSError) as e:
        return [fail("postgres", f"{where}: cannot connect ({type(e).__name__})", PG_HINT)]
    if version > SCHEMA_VERSION:
        return [fail("postgres", f"{where}: schema {version} is newer than this AgentHub's {SCHEMA_VERSION}",
                     "upgrade AgentHub")]  # fmt: skip
    if version < SCHEMA_VERSION:
        return [warn("postgres", f"{where}: schema {version}, this AgentHub's is {SCHEMA_VERSION}",
                     "the daemon migrates it at start (or run `agenthub migrate`)")]  # fmt: skip
    return [ok("postgres", f"{where}: reachable, schema {version} is current")]


def agent_checks(settings: Settings) -> list[Check]:
    """The agent definitions as `serve` loads them: one line for those that load, one failing line per broken one
    (the daemon starts without it)."""
    agents = load_agents(settings.agents_dir, default_agent=settings.default_agent)
    checks = [
        fail("agents", f"{name}: {reason}", f"fix {settings.agents_dir / name / 'agent.json'}; the other agents start "
             "without it")
        for name, reason in sorted(agents.errors.items())
    ]  # fmt: skip
    if agents.agents:
        checks.insert(0, ok("agents", f"{', '.join(agents.names())} from {settings.agents_dir}"))
    return checks


async def mcp_checks(settings: Settings) -> list[Check]:
    """Start each MCP server the agents declare, wait for its first start, and stop it again."""
    agents = load_agents(settings.agents_dir, default_agent=settings.default_agent)
    declared = [(agent, name, config) for agent in agents.agents.values() for name, config in agent.config.mcp.items()]
    if not declared:
        return []
    from agenthub.agent.mcp_server import McpServer, ServerState

    checks = []
    for agent, name, config in declared:
        what = f"{agent.name}/{name}"
        target = config.url or config.command or ""
        server = McpServer(agent.name, name, config, timeout_s=MCP_START_S, backoff=RestartBackoff())
        server.start()
        try:
            await asyncio.wait_for(server.wait_first_attempt(), MCP_START_S)
        except TimeoutError:
            pass
        finally:
            state, tools = server.state, len(server.tools)
            await server.aclose()
        if state is ServerState.RUNNING:
            checks.append(ok("mcp", f"{what} ({target}): started, {tools} tool(s)"))
        else:
            hint = f'see agents/{agent.name}/agent.json "mcp" → {name}; run the command by hand to see why'
            checks.append(fail("mcp", f"{what} ({target}): did not start within {MCP_START_S:.0f} s", hint))
    return checks


def http_table_check(settings: Settings) -> list[Check]:
    """`[channels.http]` as `serve` reads it: a key it does not have, or a locale without texts, stops a start."""
    from agenthub.api.server import api_config

    try:
        api_config(settings.channels.get("http", {}))
    except ConfigError as e:
        return [fail("channels.http", str(e), "fix [channels.http] in agenthub.toml")]
    return []


async def channel_checks(settings: Settings) -> list[Check]:
    """Each configured channel's credentials, through its `DOCTOR_HOOKS` check."""
    checks = http_table_check(settings)
    for name, raw in settings.channels.items():
        target = DOCTOR_HOOKS.get(name)
        if target is None or not raw.get("enabled", True):
            continue
        module_name, _, attr = target.partition(":")
        check: ChannelChecks = getattr(importlib.import_module(module_name), attr)
        checks.extend(await check(raw))
    return checks
