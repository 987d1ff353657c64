"""The import rules, read from the source with `ast`: the core never imports channels, memory never imports the
gateway, storage never imports session, and no test module imports another (only tests/support and fixtures)."""

from __future__ import annotations

from pathlib import Path

from tests.support.import_rules import Rule, violations
from tests.support.paths import REPO, plant

CORE_WITHOUT_CHANNELS = Rule("agenthub", "channels")
MEMORY_WITHOUT_GATEWAY = Rule("agenthub.memory", "agenthub.gateway")
STORAGE_WITHOUT_SESSION = Rule("agenthub.storage", "agenthub.session")
TESTS_ONLY_IMPORT_SUPPORT = Rule("tests", "tests", allowed=("tests.support",))
SOURCE = ("agenthub", "channels")


def assert_kept(packages: tuple[str, ...], rule: Rule) -> None:
    found = violations(REPO, packages, (rule,))
    assert not found, f"{rule}:\n" + "\n".join(found)


def test_the_core_never_imports_channels() -> None:
    assert_kept(SOURCE, CORE_WITHOUT_CHANNELS)


def test_memory_never_imports_the_gateway() -> None:
    assert_kept(SOURCE, MEMORY_WITHOUT_GATEWAY)


def test_storage_never_imports_session() -> None:
    assert_kept(SOURCE, STORAGE_WITHOUT_SESSION)


def test_no_test_module_imports_another() -> None:
    assert_kept(("tests",), TESTS_ONLY_IMPORT_SUPPORT)


def test_the_checker_sees_every_python_file_of_the_source() -> None:
    checked = violations(REPO, SOURCE, (Rule("agenthub", "agenthub"),))
    importers = {line.split(":", 1)[0] for line in checked}
    assert "agenthub/hosting/app.py" in importers and "agenthub/memory/wiring.py" in importers
    assert "channels/wecom/channel.py" not in importers  # a rule applies to its importer's package only


PLANTED = {
    "agenthub/__init__.py": "",
    "agenthub/app.py": "import json\nimport channels.wecom\n",
    "agenthub/memory/__init__.py": "",
    "agenthub/memory/jobs.py": "from agenthub.storage import keys\n\n\ndef run():\n    from ..gateway import core\n",
    "agenthub/memory/names.py": "from . import jobs\nfrom agenthub import gateway\n",
    "agenthub/storage/__init__.py": "from .keys import SessionKey\n",
    "agenthub/storage/keys.py": (
        "from typing import TYPE_CHECKING\n"
        "from agenthub.session_names import ok\n"
        "if TYPE_CHECKING:\n"
        "    from agenthub.session.history import SessionHistory\n"
    ),
    "agenthub/storage/jsonl/__init__.py": "from ...session import manager\n",
    "channels/__init__.py": "",
    "channels/wecom.py": "from agenthub.gateway import core\nimport channels.feishu\n",
    "tests/__init__.py": "",
    "tests/support/__init__.py": "",
    "tests/support/fakes.py": "from tests.support import roots\n",
    "tests/test_a.py": "from tests.support.fakes import FakeModel\nfrom tests.test_b import helper\n",
    "tests/gateway/test_c.py": "def test():\n    from ..conftest import write_agent\n",
}


def test_the_checker_catches_planted_violations_with_file_and_line(tmp_path: Path) -> None:
    plant(tmp_path, PLANTED)
    rules = (CORE_WITHOUT_CHANNELS, MEMORY_WITHOUT_GATEWAY, STORAGE_WITHOUT_SESSION, TESTS_ONLY_IMPORT_SUPPORT)
    assert violations(tmp_path, ("agenthub", "channels", "tests"), rules) == [
        "agenthub/app.py:2: agenthub.app imports channels.wecom (agenthub never imports channels)",
        "agenthub/memory/jobs.py:5: agenthub.memory.jobs imports agenthub.gateway"
        " (agenthub.memory never imports agenthub.gateway)",
        "agenthub/memory/names.py:2: agenthub.memory.names imports agenthub.gateway"
        " (agenthub.memory never imports agenthub.gateway)",
        "agenthub/storage/jsonl/__init__.py:1: agenthub.storage.jsonl imports agenthub.session"
        " (agenthub.storage never imports agenthub.session)",
        "agenthub/storage/keys.py:4: agenthub.storage.keys imports agenthub.session.history"
        " (agenthub.storage never imports agenthub.session)",
        "tests/gateway/test_c.py:2: tests.gateway.test_c imports tests.conftest"
        " (tests never imports tests other than tests.support)",
        "tests/test_a.py:2: tests.test_a imports tests.test_b (tests never imports tests other than tests.support)",
    ]
