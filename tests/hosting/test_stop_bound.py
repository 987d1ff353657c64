"""`StopBound` in a process of its own: a stop cut short at the bound is a failure (exit 1, one line), not a success."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from agenthub.hosting.stop_bound import EXIT_CUT_SHORT
from tests.support.paths import REPO

HANGS = textwrap.dedent(
    """
    import sys, time
    from agenthub.hosting.stop_bound import StopBound
    bound = StopBound({bound_s})
    bound.arm()  # SIGTERM came: the clean-up below never ends
    {disarm}
    time.sleep(60)
    """
)
BOUND_S = 0.3


def _run(disarm: str) -> subprocess.CompletedProcess[str]:
    script = HANGS.format(bound_s=BOUND_S, disarm=disarm)
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=30, check=False
    )


def test_a_stop_cut_short_at_the_bound_exits_1_with_one_line_on_stderr() -> None:
    done = _run(disarm="")
    assert done.returncode == EXIT_CUT_SHORT == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "stop cut short" in lines[0] and f"{BOUND_S:g} s" in lines[0] and "http.drain_timeout_s" in lines[0]
    assert "stop_cut_short" in done.stdout  # the daemon's log says it too


def test_a_stop_finished_before_the_bound_is_not_cut() -> None:
    done = _run(disarm=f"bound.disarm(); time.sleep({BOUND_S * 3}); sys.exit(0)")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "stop_cut_short" not in done.stdout


WITHOUT_STREAMS = textwrap.dedent(
    """
    import os, sys, time
    from agenthub.hosting.stop_bound import StopBound
    os.close(2)  # stderr gone (a closed journal socket, a reader gone): the line cannot be written
    sys.stdout = None
    bound = StopBound({bound_s})
    bound.arm()
    time.sleep(10)
    sys.exit(0)
    """
)


def test_the_bound_ends_the_process_even_when_its_line_cannot_be_written() -> None:
    """The line and the flushes are best effort: a stream that fails never keeps the process from ending at the
    bound (it would otherwise run on until systemd's SIGKILL)."""
    script = WITHOUT_STREAMS.format(bound_s=BOUND_S)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=30, check=False)
    assert done.returncode == EXIT_CUT_SHORT
