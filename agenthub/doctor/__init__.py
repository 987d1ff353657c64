"""`agenthub doctor`: one line per check (ok / warn / fail) of what a first start needs, each naming what it tried
and what to do; never a secret."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """The outcome of one check: `detail` says what was tried (host:port, path) and found, `hint` what to do."""

    status: Status
    name: str
    detail: str
    hint: str = ""

    def line(self) -> str:
        text = f"{self.status:<5} {self.name:<14} {self.detail}"
        return f"{text} → {self.hint}" if self.hint else text


def ok(name: str, detail: str) -> Check:
    return Check("ok", name, detail)


def warn(name: str, detail: str, hint: str = "") -> Check:
    return Check("warn", name, detail, hint)


def fail(name: str, detail: str, hint: str = "") -> Check:
    return Check("fail", name, detail, hint)


def exit_status(checks: list[Check]) -> int:
    """0 when nothing failed (warnings included), else 1."""
    return 1 if any(c.status == "fail" for c in checks) else 0
