"""`agenthub forget` (design §14): everything about one person in every chat, on the files when no daemon runs,
through the daemon's admin route while one does; asks first unless --yes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import psycopg

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.memory.wiring import L3_TIMER
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.scheduler.jobs import Job
from agenthub.scheduler.store import document
from agenthub.session_keys import SessionKey
from agenthub.storage.jobs import JobDocument
from agenthub.storage.lease import instance_lease
from agenthub.storage.memory_files import MemoryName
from agenthub.storage.postgres import PostgresJobs, open_database
from agenthub.storage.search_index import SearchScope
from agenthub.storage.tokens import TokenStore
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, reply_text, reply_tool
from tests.support.forget import PRIVATE_CONFIG, files_with, lines_of, others_exchanges
from tests.support.harness import RunningApi
from tests.support.memory import echo_l3, gateway_on
from tests.support.paths import REPO
from tests.support.roots import make_settings

ROOT = REPO
FACT, FACT_ZH, OTHER_CHANNEL_FACT = "4417-ZEBRA", "榛子过敏", "9931-OTTER"


def cli_env(settings: Settings, home: Path, **extra: str) -> dict[str, str]:
    """The subprocess runs this checkout's code on the test's directories."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "NO_PROXY": "127.0.0.1,localhost",
        "AGENTHUB_DATA_DIR": str(settings.data_dir),
        "AGENTHUB_AGENTS_DIR": str(settings.agents_dir),
        "AGENTHUB_AUTH_DIR": str(settings.auth_dir),
        "AGENTHUB_WORKSPACE_DIR": str(settings.workspace_dir),
        "AGENTHUB_SESSION__FSYNC": "false",
        **extra,
    }


async def run_cli(env: dict[str, str], cwd: Path, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", *args, env=env, cwd=cwd,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def say(gw: GatewayCore, message: InboundMessage) -> None:
    final = await (await gw.submit(message)).result()
    assert isinstance(final, DoneEvent), final


async def plant_two_agents(settings: Settings, fake_llm: FakeAnthropic) -> None:
    """Alice (wecom) in a group with Bob and in a private chat with each of two agents; another person with the
    same id on Feishu, who is not her."""
    write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    write_agent(settings.agents_dir, "helper", PRIVATE_CONFIG)
    async with build_gateway(settings) as gw:
        fake_llm.script(
            reply_tool("write_memory", {"content": f"- Alice's locker is {FACT}"}, tool_id="tu_1"),
            reply_text(f"Saved your locker {FACT}."),
        )
        await say(gw, InboundMessage("wecom", "alice-dm", "alice", f"My locker code is {FACT}, remember it"))
        await say(gw, InboundMessage("wecom", "team", "alice", f"Team: my locker code is {FACT} if you need it"))
        await say(gw, InboundMessage("wecom", "team", "bob", "Bob prefers the blue team jersey"))
        await say(gw, InboundMessage("wecom", "dm2", "alice", f"我对{FACT_ZH}很严重，记住", agent="helper"))
        await say(gw, InboundMessage("feishu", "fs", "alice", f"feishu alice keeps {OTHER_CHANNEL_FACT}"))
        for agent in ("default", "helper"):
            definition, team = gw.agents.get(agent), SessionKey(agent, "wecom", "team")
            group_profile = gw.memory_files.person_profile(definition, team, "alice", "group")
            for profile in (*await gw.memory_files.person_profiles(definition, "wecom", "alice"), group_profile):
                await gw.memory_files.store.write(profile, f"- locker {FACT}, {FACT_ZH}\n")


async def test_forget_without_a_daemon_asks_then_redacts_every_chat_of_that_person_on_that_channel(
    settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    await plant_two_agents(settings, fake_llm)
    roots = [settings.data_dir, settings.auth_dir]
    team = settings.data_dir / "default" / "sessions" / "default_wecom_team.jsonl"
    feishu = settings.data_dir / "default" / "sessions" / "default_feishu_fs.jsonl"
    bob_before, feishu_before = others_exchanges(lines_of(team), "alice"), feishu.read_bytes()
    env = cli_env(settings, tmp_path)

    code, _, err = await run_cli(env, tmp_path, "forget", "--channel", "wecom", "--sender", "alice", stdin=b"no\n")
    assert code == 1 and "yes" in err
    assert files_with(roots, FACT), "answered no: nothing changed"

    code, out, err = await run_cli(env, tmp_path, "forget", "--channel", "wecom", "--sender", "alice", "--yes")
    assert code == 0, err
    assert "3" in out  # three chats
    for fact in (FACT, FACT_ZH):
        assert files_with(roots, fact) == [], fact
    assert others_exchanges(lines_of(team), "alice") == bob_before
    assert feishu.read_bytes() == feishu_before  # the same id on another channel is another person
    audit = [line for line in err.splitlines() if "forget_audit" in line]
    assert len(audit) == 1 and "alice" not in audit[0] and FACT not in audit[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _chat(base: str, token: str, content: str) -> None:
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            base + "/api/agents/default/chat",
            json={"chat_id": "c1", "content": content},
            headers={"Authorization": f"Bearer {token}"},
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()


async def _wait_healthy(base: str, proc: asyncio.subprocess.Process) -> None:
    async with asyncio.timeout(30), aiohttp.ClientSession() as client:
        while True:
            assert proc.returncode is None, "the daemon exited"
            try:
                async with client.get(base + "/healthz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)


async def test_forget_while_the_daemon_runs_goes_through_its_admin_route(
    settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    tokens = TokenStore(settings.auth_dir)
    alice, bob = tokens.create("alice"), tokens.create("bob")  # an HTTP sender is its token's name
    port = _free_port()
    env = cli_env(
        settings,
        tmp_path,
        AGENTHUB_HTTP__PORT=str(port),
        AGENTHUB_LLM__BASE_URL=fake_llm.base_url,
        AGENTHUB_LLM__API_KEY="test-key",
        AGENTHUB_LLM__RETRY_BASE_S="0.01",
    )
    base = f"http://127.0.0.1:{port}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", "serve", env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        await _wait_healthy(base, proc)
        await _chat(base, alice, f"My locker code is {FACT}, keep it")
        await _chat(base, bob, "Bob prefers the blue team jersey")
        history = settings.data_dir / "default" / "sessions" / "default_http_c1.jsonl"
        bob_before = others_exchanges(lines_of(history), "alice", "http")

        code, out, err = await run_cli(
            {**env, "AGENTHUB_TOKEN": bob}, tmp_path, "forget", "--channel", "http", "--sender", "alice", "--yes"
        )
        assert code == 0, err
        assert "1 message(s)" in out  # the daemon's counts, printed in the system locale (en here)
        assert files_with([settings.data_dir, settings.auth_dir], FACT) == []
        assert others_exchanges(lines_of(history), "alice", "http") == bob_before
        async with (
            aiohttp.ClientSession() as client,
            client.get(
                base + "/api/agents/default/sessions/c1/messages", headers={"Authorization": f"Bearer {bob}"}
            ) as resp,
        ):
            served = json.dumps(await resp.json(), ensure_ascii=False)
        assert FACT not in served and "Bob prefers" in served  # the daemon's own cache was redacted, not just files
        await _chat(base, bob, "and now?")
        assert FACT not in json.dumps(fake_llm.message_requests()[-1].body, ensure_ascii=False)
    finally:
        proc.send_signal(signal.SIGTERM)
        daemon_log, _ = await asyncio.wait_for(proc.communicate(), 30)
    audit = [line for line in daemon_log.decode().splitlines() if "forget_audit" in line]
    assert len(audit) == 1 and "http:bob" in audit[0] and FACT not in audit[0]


async def test_admin_route_refuses_bad_input_in_the_documented_shape(api: RunningApi) -> None:
    status, body = await api.call("POST", "/api/forget", json={"channel": "a/b", "sender_id": "x"})
    assert status == 400 and body["error"]["code"] == "invalid_id"
    status, body = await api.call("POST", "/api/forget", json={"channel": "wecom", "sender_id": "x", "agent": "nope"})
    assert status == 404 and body["error"]["code"] == "agent_not_found"
    status, body = await api.call("POST", "/api/forget", json={"channel": "wecom"})
    assert status == 422
    status, body = await api.call("POST", "/api/forget", json={"channel": "wecom", "sender_id": "nobody"})
    assert status == 200 and body["forgotten"]["messages"] == 0
    for odd in ("a\\b", "a\nb", "../x"):  # ids a platform may send: their profiles have names, so they can go
        status, body = await api.call("POST", "/api/forget", json={"channel": "wecom", "sender_id": odd})
        assert status == 200, body
    status, body = await api.call("POST", "/api/forget", json={"channel": "wecom", "sender_id": "a\x00b"})
    assert status == 400 and body["error"] == {"code": "invalid_id", "message": "sender_id contains NUL"}
    status, body = await api.call("POST", "/api/forget", json={"channel": "wecm", "sender_id": "alice"})
    assert status == 400 and body["error"] == {
        "code": "unknown_channel",
        "message": "unknown channel 'wecm' (known: cli, feishu, http, wecom)",
    }


async def test_a_mistyped_channel_is_refused_not_reported_as_done(settings: Settings, tmp_path: Path) -> None:
    """`--channel wecm` would forget nobody and say "Done: 0 chat(s)": a privacy request silently not carried
    out. It is refused naming the channels there are, before anything is asked or opened."""
    env = cli_env(settings, tmp_path)
    code, out, err = await run_cli(env, tmp_path, "forget", "--channel", "wecm", "--sender", "alice", "--yes")
    assert (code, out) == (2, "")
    assert err == "agenthub forget: unknown channel 'wecm' (known: cli, feishu, http, wecom)\n"


async def test_forget_without_a_daemon_reports_a_refused_path_in_one_line(settings: Settings, tmp_path: Path) -> None:
    sessions = settings.data_dir / "default" / "sessions"
    sessions.mkdir(parents=True)
    line = {"role": "user", "content": "x", "sender_id": "alice", "channel": "wecom"}
    (sessions / "default_wecom_team.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (sessions / "archive").symlink_to(elsewhere)  # planted: storage refuses to follow it
    env = cli_env(settings, tmp_path)
    code, _, err = await run_cli(env, tmp_path, "forget", "--channel", "wecom", "--sender", "alice", "--yes")
    assert code == 1 and "symbolic link" in err and "Traceback" not in err


async def test_forget_without_a_daemon_on_postgres_redacts_the_database(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """`[store] backend = "postgres"`: the histories and memory files are in the database, and so is the forget."""
    settings = make_settings(tmp_path / "host", fake_llm.base_url, store={"backend": "postgres", "dsn": postgres_dsn})
    write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    fake_llm.responder = echo_l3
    dm = SessionKey("default", "wecom", "alice-dm")
    async with gateway_on(settings) as gw:
        fake_llm.script(reply_tool("write_memory", {"content": f"- locker {FACT}"}), reply_text("noted"))
        private = {"chat_type": "private"}
        await say(gw, InboundMessage("wecom", "alice-dm", "alice", f"My locker is {FACT}", metadata=private))
        await gw.timers[L3_TIMER].tick_now()
        profiles = await gw.memory_files.person_profiles(gw.agents.get("default"), "wecom", "alice")
        assert FACT in await gw.memory_files.read(MemoryName.chat_memory(dm))
        assert FACT in await gw.memory_files.read(profiles[0])
        assert await gw.search.search("default", FACT, SearchScope(str(dm)), 5)  # in the shared index now
    assert await index_rows_holding(postgres_dsn, FACT) > 0
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:  # an earlier embedding
        await conn.execute(
            "INSERT INTO search_vectors (agent, session, digest, kind, seq, role, speaker, ts, text, model, vec) "
            "VALUES ('default', %s, 'd1', 'history', 0, 'user', 'alice', 1, %s, 'm', '\\x00000000'::bytea)",
            (str(dm), f"My locker is {FACT}"),
        )
    assert await index_rows_holding(postgres_dsn, FACT) > 0
    env = cli_env(settings, tmp_path, AGENTHUB_STORE__BACKEND="postgres", AGENTHUB_STORE__DSN=postgres_dsn)
    code, _, err = await run_cli(env, tmp_path, "forget", "--channel", "wecom", "--sender", "alice", "--yes")
    assert code == 0, err
    async with gateway_on(settings) as gw:
        assert await gw.memory_files.read(MemoryName.chat_memory(dm)) == ""
        assert [await gw.memory_files.read(n) for n in profiles] == [""] * len(profiles)
        assert FACT not in json.dumps(await gw.history.load(dm), ensure_ascii=False)
    assert await index_rows_holding(postgres_dsn, FACT) == 0  # nor in the search index's tables


async def index_rows_holding(dsn: str, text: str) -> int:
    """Rows of the shared search index's tables holding `text` in any column."""
    found = 0
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for table in ("search_docs", "search_blocks", "search_names", "search_sources", "search_vectors"):
            cursor = await conn.execute(f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s", (f"%{text}%",))
            row = await cursor.fetchone()
            found += int(row[0]) if row else 0
    return found


def _alices_job(job_id: str) -> JobDocument:
    job = Job(
        id=job_id, agent="default", channel="wecom", chat_id="alice-dm", timezone="Asia/Shanghai",
        created_at=1_700_000_000.0, created_by="alice", cron="0 9 * * *", text=f"locker {FACT}",
        next_due=4_000_000_000.0,
    )  # fmt: skip
    return document(job)


async def test_forget_without_a_daemon_on_postgres_drops_the_persons_jobs_in_the_database(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The jobs of a postgres deployment are in the table `jobs` (shared by every instance), not in the files."""
    settings = make_settings(tmp_path / "host", fake_llm.base_url, store={"backend": "postgres", "dsn": postgres_dsn})
    write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    database = await open_database(postgres_dsn)
    try:
        await PostgresJobs(database).put(_alices_job("alice-daily"))
        env = cli_env(settings, tmp_path, AGENTHUB_STORE__BACKEND="postgres", AGENTHUB_STORE__DSN=postgres_dsn)
        code, _, err = await run_cli(env, tmp_path, "forget", "--channel", "wecom", "--sender", "alice", "--yes")
        assert code == 0, err
        assert await PostgresJobs(database).load_all() == []  # gone: it would have kept firing on the leader
    finally:
        await database.close()


async def test_forget_on_postgres_while_an_instance_runs_elsewhere_leaves_everything_to_its_route(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Instance A (another host) has served Alice's chat and holds its cached history; a forget run on a host
    without a daemon must not redact behind A's back (A's next claim of the session would not reload, and its
    next write would put the history back): it refuses, changes nothing, and names the daemon's route."""
    store = {"backend": "postgres", "dsn": postgres_dsn}
    host_a = make_settings(tmp_path / "host-a", fake_llm.base_url, store=store)
    host_b = make_settings(tmp_path / "host-b", fake_llm.base_url, store=store)
    for settings in (host_a, host_b):
        write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    dm = SessionKey("default", "wecom", "alice-dm")
    private = {"chat_type": "private"}
    async with gateway_on(host_a) as a:
        alive = await a.leases.store.acquire(instance_lease(a.leases.holder), a.leases.holder, 60.0)
        assert alive is not None  # what `agenthub serve` holds while it runs
        await say(a, InboundMessage("wecom", "alice-dm", "alice", f"My locker is {FACT}", metadata=private))
        env = cli_env(host_b, tmp_path, AGENTHUB_STORE__BACKEND="postgres", AGENTHUB_STORE__DSN=postgres_dsn)

        code, _, err = await run_cli(env, tmp_path, "forget", "--channel", "wecom", "--sender", "alice", "--yes")

        assert code == 2, err
        assert "/api/forget" in err and "Traceback" not in err
        await say(a, InboundMessage("wecom", "alice-dm", "alice", "what is my locker?", metadata=private))
        stored = json.dumps(await a.history.store.load(dm), ensure_ascii=False)
        assert f"My locker is {FACT}" in stored and "what is my locker?" in stored  # nothing redacted behind A
        await a.leases.store.release(alive)  # A stops
    code, _, err = await run_cli(env, tmp_path, "forget", "--channel", "wecom", "--sender", "alice", "--yes")
    assert code == 0, err
    async with gateway_on(host_b) as b:
        assert FACT not in json.dumps(await b.history.load(dm), ensure_ascii=False)


async def test_forget_on_postgres_redacts_each_chat_under_its_session_lease_so_a_running_gateway_reloads_it(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A gateway without an `instance:` lease (an in-process `agenthub chat` on another host, or an instance that
    starts while the forget runs) keeps Alice's chat in its cache: the forget takes the chat's session lease,
    so the gateway's next claim finds a newer fence and reloads the redacted history instead of sending its copy."""
    store = {"backend": "postgres", "dsn": postgres_dsn}
    host_a = make_settings(tmp_path / "host-a", fake_llm.base_url, store=store)
    host_b = make_settings(tmp_path / "host-b", fake_llm.base_url, store=store)
    for settings in (host_a, host_b):
        write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    private = {"chat_type": "private"}
    async with gateway_on(host_a) as a:
        await say(a, InboundMessage("wecom", "alice-dm", "alice", f"My locker is {FACT}", metadata=private))
        env = cli_env(host_b, tmp_path, AGENTHUB_STORE__BACKEND="postgres", AGENTHUB_STORE__DSN=postgres_dsn)
        code, _, err = await run_cli(env, tmp_path, "forget", "--channel", "wecom", "--sender", "alice", "--yes")
        assert code == 0, err

        await say(a, InboundMessage("wecom", "alice-dm", "alice", "what is my locker?", metadata=private))

        sent = fake_llm.message_requests()[-1].body
        assert "what is my locker?" in json.dumps(sent, ensure_ascii=False)
        assert FACT not in json.dumps(sent, ensure_ascii=False)  # the model never gets the forgotten history
        stored = await a.history.store.load(SessionKey("default", "wecom", "alice-dm"))
        assert FACT not in json.dumps(stored, ensure_ascii=False)  # nor is it written back


ON_THE_LOOP = """
import sys, threading
from agenthub.cli import main
loop_thread = threading.main_thread()
def opened(event, args):
    if event == "open" and str(args[0]).endswith(".inbox.jsonl") and threading.current_thread() is loop_thread:
        sys.stderr.write("inbox journal read on the event loop\\n")
sys.addaudithook(opened)
sys.exit(main(sys.argv[1:]))
"""
"""`agenthub …` with an audit hook telling whether the inbox journal is opened on the thread the loop runs on."""


async def test_forget_without_a_daemon_reads_the_inbox_journal_off_the_event_loop(
    settings: Settings, tmp_path: Path
) -> None:
    journal = settings.data_dir / ".inbox.jsonl"
    journal.parent.mkdir(parents=True, exist_ok=True)
    record = {"op": "accept", "id": "e1", "seq": 1, "at": 1.0, "source": "http", "payload": {"content": "hi"}}
    journal.write_text(json.dumps(record) + "\n" + json.dumps({"op": "settle", "id": "e1"}) + "\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", ON_THE_LOOP, "forget", "--channel", "wecom", "--sender", "alice", "--yes",
        env=cli_env(settings, tmp_path), cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert "inbox journal read on the event loop" not in err.decode()
    assert journal.read_text() == ""  # the settled entry compacted away: the journal was read and rewritten


async def test_forget_started_with_stdin_closed_is_not_confirmed(settings: Settings, tmp_path: Path) -> None:
    """`<&-`: no answer can come (`sys.stdin` is None): cancelled as a "no" is, exit 1 in one line, no traceback."""
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", 'exec "$0" -m agenthub forget --channel wecom --sender alice <&-', sys.executable,
        env=cli_env(settings, tmp_path), cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, err
    assert b"Traceback" not in err and out == b"", err
